package node

import (
	"net"
	"testing"
)

func TestUDPBound(t *testing.T) {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	if !udpBound("127.0.0.1", port) {
		t.Errorf("udpBound(127.0.0.1, %d) with a socket bound there: got false, want true", port)
	}
	c.Close()
	if udpBound("127.0.0.1", port) {
		t.Errorf("udpBound(127.0.0.1, %d) after the socket closed: got true, want false", port)
	}
}
