package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/redlocklab/redlocklab/infra/fault"
)

// Control is a client of one supervisor's control endpoint (control.go): a
// Redis node's or an etcd member's. The errors a supervisor reports keep
// their identity (ErrNotRunning, ErrInvalid, ErrUnsupported).
type Control struct {
	// Addr is the endpoint, "127.0.0.1:7301".
	Addr string
	// What names the supervisor in errors: "node 1", "etcd member 2".
	What string
	// Target, when set, is recorded with every fault it asks for: "leader"
	// when the caller chose the etcd member because it led.
	Target string
}

var controlClient = &http.Client{Timeout: 2 * time.Minute}

// Status reads the supervisor's status into st: a *Status for a node, an
// *EtcdMemberStatus for an etcd member.
func (c Control) Status(ctx context.Context, st any) error {
	return c.call(ctx, http.MethodGet, "/v1/status", nil, st)
}

// Fault asks the supervisor for a fault of kind with p (validated: see
// CheckFault) and reads its answer into res: a *FaultResult for a node, an
// *EtcdFaultResult for an etcd member.
func (c Control) Fault(ctx context.Context, kind FaultKind, p fault.Params, res any) error {
	if p == nil {
		p = fault.Params{} // the endpoint reads a JSON object
	}
	path := "/v1/faults/" + string(kind)
	if c.Target != "" {
		path += "?" + url.Values{"target": {c.Target}}.Encode()
	}
	return c.call(ctx, http.MethodPost, path, p, res)
}

func (c Control) call(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Addr+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := controlClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s control endpoint %s (is the supervisor running? see `redlab lab status`): %w", c.What, c.Addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			return fmt.Errorf("%s: %s: %s", c.What, resp.Status, bytes.TrimSpace(b))
		}
		switch eb.Code {
		case codeNotRunning:
			return &remoteError{msg: eb.Error, is: ErrNotRunning}
		case codeInvalid:
			return &remoteError{msg: eb.Error, is: ErrInvalid}
		case codeUnsupported:
			return &remoteError{msg: eb.Error, is: ErrUnsupported}
		}
		return errors.New(eb.Error)
	}
	return json.Unmarshal(b, out)
}

// remoteError is an error reported by a supervisor, keeping the identity
// of the sentinel it wrapped there.
type remoteError struct {
	msg string
	is  error
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool { return target == e.is }
