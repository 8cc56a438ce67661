// Package etcdstatus asks etcd members how they are, over the HTTP endpoints
// every member serves on its client port (/health and the gRPC gateway's
// /v3/maintenance/status): plain requests that need no gRPC connection, so a
// member that was killed and restarted answers the very next question instead
// of after a client's reconnect backoff. The test harness (internal/etcdtest)
// and the lab (infra/lab) both decide "which member leads" here.
package etcdstatus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrNoLeader is returned by Leader when no member is reported as leader by a
// majority of the cluster: an election is under way, or a quorum is down.
var ErrNoLeader = errors.New("etcdstatus: no leader")

// Status is what one member says of itself and of the cluster.
type Status struct {
	// MemberID is the answering member's ID.
	MemberID uint64
	// Leader is the ID of the member it follows (its own ID when it leads), 0
	// when it knows of no leader.
	Leader uint64
	// RaftTerm is the member's current Raft term.
	RaftTerm uint64
	// Revision is the store's revision as this member has applied it.
	Revision int64
	// Version is the server's version ("3.6.16").
	Version string
}

// client has no proxy: the members are on loopback, and an HTTP_PROXY in the
// environment must not reroute the question.
var client = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// Get asks the member serving clientURL ("http://127.0.0.1:2379") for its
// status. ctx bounds the request.
func Get(ctx context.Context, clientURL string) (Status, error) {
	body, err := do(ctx, http.MethodPost, clientURL, "/v3/maintenance/status", []byte("{}"))
	if err != nil {
		return Status{}, err
	}
	// The gateway writes 64-bit integers as strings.
	var raw struct {
		Header struct {
			MemberID string `json:"member_id"`
			Revision string `json:"revision"`
			RaftTerm string `json:"raft_term"`
		} `json:"header"`
		Leader  string `json:"leader"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return Status{}, fmt.Errorf("etcdstatus: status of %s: %w", clientURL, err)
	}
	var s Status
	var errs []error
	s.MemberID, errs = parseUint(raw.Header.MemberID, "member_id", errs)
	s.Leader, errs = parseUint(raw.Leader, "leader", errs)
	s.RaftTerm, errs = parseUint(raw.Header.RaftTerm, "raft_term", errs)
	var rev uint64
	rev, errs = parseUint(raw.Header.Revision, "revision", errs)
	s.Revision = int64(rev)
	s.Version = raw.Version
	if err := errors.Join(errs...); err != nil {
		return Status{}, fmt.Errorf("etcdstatus: status of %s: %w", clientURL, err)
	}
	if s.MemberID == 0 {
		return Status{}, fmt.Errorf("etcdstatus: status of %s names no member: %s", clientURL, body)
	}
	return s, nil
}

func parseUint(s, field string, errs []error) (uint64, []error) {
	if s == "" {
		return 0, errs // the gateway omits zero values
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, append(errs, fmt.Errorf("field %s: %w", field, err))
	}
	return v, errs
}

// Healthy returns nil when the member serving clientURL reports itself
// healthy: it has a leader and serves a linearizable read (etcd's /health).
func Healthy(ctx context.Context, clientURL string) error {
	body, err := do(ctx, http.MethodGet, clientURL, "/health", nil)
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("etcdstatus: health of %s: %w", clientURL, err)
	}
	if h.Health != "true" {
		return fmt.Errorf("etcdstatus: %s is not healthy: %s", clientURL, h.Reason)
	}
	return nil
}

func do(ctx context.Context, method, base, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("etcdstatus: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("etcdstatus: %s %s: %w", method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("etcdstatus: %s %s: %w", method, req.URL, err)
	}
	// /health answers 503 with a JSON body when unhealthy: the body says why.
	if resp.StatusCode != http.StatusOK && !(path == "/health" && resp.StatusCode == http.StatusServiceUnavailable) {
		return nil, fmt.Errorf("etcdstatus: %s %s: %s: %s", method, req.URL, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// Leader asks every member (clientURLs, one per member of the cluster, in
// any order) at once and returns the index of the leader: the member that a
// majority of the whole cluster (len(clientURLs)/2+1, counting members that
// do not answer as dissent) name as leader, and that names itself. A former
// leader that was paused or cut off and still believes it leads is thereby
// not taken for the leader. statuses holds each member's answer, the zero
// Status for one that did not answer. The error is ErrNoLeader (wrapped,
// with the answers) when there is none.
func Leader(ctx context.Context, clientURLs []string) (leader int, statuses []Status, err error) {
	statuses = make([]Status, len(clientURLs))
	errs := make([]error, len(clientURLs))
	var wg sync.WaitGroup
	for i, u := range clientURLs {
		wg.Go(func() { statuses[i], errs[i] = Get(ctx, u) })
	}
	wg.Wait()
	votes := map[uint64]int{}
	for _, s := range statuses {
		if s.Leader != 0 {
			votes[s.Leader]++
		}
	}
	for i, s := range statuses {
		if s.MemberID != 0 && s.Leader == s.MemberID && votes[s.MemberID] >= len(clientURLs)/2+1 {
			return i, statuses, nil
		}
	}
	err = fmt.Errorf("%w among %d members (votes by leader ID: %s)", ErrNoLeader, len(clientURLs), voteList(votes))
	if e := errors.Join(errs...); e != nil {
		err = fmt.Errorf("%w; %w", err, e)
	}
	return -1, statuses, err
}

// voteList writes votes by leader ID as "8e9e05c52164694d: 2, ...", in ID
// order, or "none".
func voteList(votes map[uint64]int) string {
	if len(votes) == 0 {
		return "none"
	}
	ids := make([]uint64, 0, len(votes))
	for id := range votes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatUint(id, 16) + ": " + strconv.Itoa(votes[id])
	}
	return strings.Join(out, ", ")
}
