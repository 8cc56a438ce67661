package node

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What a power cut took from a Redis node, in writes: the power-loss
// filesystem counts bytes, and the AOF's write commands before and after
// the cut turn them into acknowledged writes lost (fault.PowerLossResult's
// CutCommands).
//
// Redis 7 keeps a multi-part AOF: a directory (appenddirname) with a base
// file (the dataset at the last rewrite), incr files with the commands
// since, and a manifest naming them. Only incr files take new writes, so
// only they are counted.

// aofWrites counts the write commands in the AOF's incr files as they are
// now (0 without an AOF): before and after a cut, what the cut took.
func aofWrites(c redisConf) int64 {
	files, err := readAOFManifest(filepath.Join(c.aofDir(), c.aofManifest()))
	if err != nil {
		return 0
	}
	var n int64
	for _, name := range files.incr {
		f, err := os.Open(filepath.Join(c.aofDir(), name))
		if err != nil {
			continue
		}
		cmds, _ := aofCommands(f)
		f.Close()
		for _, cmd := range cmds {
			if cmd.write {
				n++
			}
		}
	}
	return n
}

// aofFiles are the files a manifest names, by type.
type aofFiles struct {
	base string
	incr []string // in manifest order: the last one takes new writes
}

// readAOFManifest parses a Redis 7 AOF manifest: one line per file,
// "file NAME seq N type b|h|i". History files (h) are left out.
func readAOFManifest(path string) (aofFiles, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return aofFiles{}, err
	}
	var out aofFiles
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] != "file" || len(f)%2 != 0 {
			return aofFiles{}, fmt.Errorf("node: AOF manifest %s line %d: %q", path, i+1, line)
		}
		name, typ := f[1], ""
		for j := 2; j+1 < len(f); j += 2 {
			if f[j] == "type" {
				typ = f[j+1]
			}
		}
		switch typ {
		case "b":
			out.base = name
		case "i":
			out.incr = append(out.incr, name)
		}
	}
	return out, nil
}

// aofCommand is one command in an AOF file.
type aofCommand struct {
	end int64 // the offset just after it
	// write is false for MULTI, EXEC and SELECT.
	write bool
}

// aofCommands parses a file of RESP commands (an incr file, or an AOF
// without RDB preamble) and returns each complete command. A partial
// command at the end (a write in progress) is left out.
func aofCommands(r io.Reader) ([]aofCommand, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		out []aofCommand
		off int64
	)
	for {
		name, used, err := readAOFCommand(br)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("node: AOF at byte %d: %w", off, err)
		}
		off += used
		cmd := strings.ToUpper(name)
		out = append(out, aofCommand{end: off, write: cmd != "MULTI" && cmd != "EXEC" && cmd != "SELECT"})
	}
}

// readAOFCommand reads one RESP array of bulk strings and returns its first
// element (the command name) and its size in bytes.
func readAOFCommand(br *bufio.Reader) (name string, used int64, err error) {
	line, err := br.ReadSlice('\n')
	used += int64(len(line))
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return "", used, err
	}
	if len(line) < 4 || line[0] != '*' || !bytes.HasSuffix(line, []byte("\r\n")) {
		return "", used, fmt.Errorf("want a RESP array, got %q", line)
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil || n < 1 {
		return "", used, fmt.Errorf("bad array length %q", line)
	}
	for i := 0; i < n; i++ {
		line, err := br.ReadSlice('\n')
		used += int64(len(line))
		if err != nil {
			return "", used, unexpectedEOF(err)
		}
		if len(line) < 4 || line[0] != '$' || !bytes.HasSuffix(line, []byte("\r\n")) {
			return "", used, fmt.Errorf("want a bulk string, got %q", line)
		}
		size, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil || size < 0 {
			return "", used, fmt.Errorf("bad bulk length %q", line)
		}
		if i == 0 {
			buf := make([]byte, size+2)
			if _, err := io.ReadFull(br, buf); err != nil {
				return "", used, unexpectedEOF(err)
			}
			name = string(buf[:size])
		} else if _, err := br.Discard(size + 2); err != nil {
			return "", used, unexpectedEOF(err)
		}
		used += int64(size + 2)
	}
	return name, used, nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
