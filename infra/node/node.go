package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlocklab/redlocklab/internal/atomicfile"
	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/redlock"
)

// Prepare writes the node's spec, rendered redis.conf and restart guard
// into stateDir/nodeN and creates the directories the configuration names.
// A node directory created here is marked fresh (see Run).
func Prepare(spec Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	dir := spec.dir()
	if spec.Machine != nil {
		// The rendered dir is inside the machine: nothing to make here.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		for _, f := range []struct {
			name string
			b    []byte
			mode os.FileMode
		}{{confFile, spec.Conf, 0o600}, {guardFile, spec.Guard, 0o644}, {userDataFile, spec.Machine.UserData, 0o600}} {
			if err := atomicfile.WriteFile(spec.path(f.name), f.b, f.mode); err != nil {
				return fmt.Errorf("node %d: %w", spec.ID, err)
			}
		}
		if err := atomicfile.WriteJSON(spec.path(specFile), spec, 0o644); err != nil {
			return fmt.Errorf("node %d: %w", spec.ID, err)
		}
		return nil
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		if err := os.WriteFile(spec.path(freshMarker), nil, 0o644); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if err := os.MkdirAll(parseRedisConf(spec.Conf).dir, 0o755); err != nil {
		return fmt.Errorf("node %d data dir: %w", spec.ID, err)
	}
	type file struct {
		name string
		b    []byte
		mode os.FileMode
	}
	files := []file{{confFile, spec.Conf, 0o644}, {guardFile, spec.Guard, 0o755}}
	if spec.hasReplica() {
		if err := os.MkdirAll(parseRedisConf(spec.ReplicaConf).dir, 0o755); err != nil {
			return fmt.Errorf("node %d replica data dir: %w", spec.ID, err)
		}
		files = append(files, file{replicaConfFile, spec.ReplicaConf, 0o644})
	} else {
		os.Remove(spec.path(replicaConfFile))
	}
	for _, f := range files {
		if err := atomicfile.WriteFile(spec.path(f.name), f.b, f.mode); err != nil {
			return fmt.Errorf("node %d: %w", spec.ID, err)
		}
	}
	if err := atomicfile.WriteJSON(spec.path(specFile), spec, 0o644); err != nil {
		return fmt.Errorf("node %d: %w", spec.ID, err)
	}
	return nil
}

// LoadSpec reads what Prepare wrote.
func LoadSpec(stateDir string, id int) (Spec, error) {
	var spec Spec
	p := filepath.Join(Dir(stateDir, id), specFile)
	if err := readJSONFile(p, &spec); err != nil {
		return spec, fmt.Errorf("node %d: %w", id, err)
	}
	var err error
	if spec.Conf, err = os.ReadFile(spec.path(confFile)); err != nil {
		return spec, fmt.Errorf("node %d: %w", id, err)
	}
	if spec.Guard, err = os.ReadFile(spec.path(guardFile)); err != nil {
		return spec, fmt.Errorf("node %d: %w", id, err)
	}
	if spec.Machine != nil {
		if spec.Machine.UserData, err = os.ReadFile(spec.path(userDataFile)); err != nil {
			return spec, fmt.Errorf("node %d: %w", id, err)
		}
	}
	if spec.ReplicaPort != 0 {
		if spec.ReplicaConf, err = os.ReadFile(spec.path(replicaConfFile)); err != nil {
			return spec, fmt.Errorf("node %d: %w", id, err)
		}
	}
	return spec, spec.Validate()
}

// redisAuth returns the ACL user the supervisor (and a start waiting for
// it) logs in as: the lab's admin when the node's redis.conf defines ACL
// users, none when it does not.
func redisAuth(spec Spec) (User, error) {
	if !parseRedisConf(spec.Conf).acl {
		return User{}, nil
	}
	c, err := ReadCredentials(filepath.Join(spec.StateDir, CredentialsFile))
	if err != nil {
		return User{}, fmt.Errorf("node %d: its redis.conf defines ACL users, so the supervisor needs the lab's credentials: %w", spec.ID, err)
	}
	return c.Admin, nil
}

// Start starts the supervisor of a prepared node detached from the
// caller (its own session, output to stateDir/nodeN/supervisor.log) by
// running `redlab node run`, and returns once the node answers PING through
// its proxy. A supervisor already running for the node is left alone.
func Start(ctx context.Context, redlab, stateDir string, id int) error {
	spec, err := LoadSpec(stateDir, id)
	if err != nil {
		return err
	}
	if pid := readPID(spec.path(supervisorPIDFile)); isSupervisor(pid, spec.StateDir, id) {
		// Already supervised; whatever state it is in is its business.
		return nil
	}
	pid, err := startDaemon(redlab, "run", spec.StateDir, id, spec.dir())
	if err != nil {
		return fmt.Errorf("node %d: %w", id, err)
	}
	return WaitUp(ctx, spec, pid)
}

// WaitUp waits until supervisor supervisorPID (a Start's, or a Run in this
// process) reports the node up and it answers through its proxy (or reports it stopped: a node stopped on purpose stays
// stopped across a supervisor restart), failing early with the end of the
// supervisor's log when the supervisor exits.
func WaitUp(ctx context.Context, spec Spec, supervisorPID int) error {
	limit := time.Duration(spec.RestartDelay) + 30*time.Second
	if spec.Machine != nil {
		// A boot, cloud-init, chrony's first update, then the guard's wait.
		limit += machineBootTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	auth, err := redisAuth(spec)
	if err != nil {
		return err
	}
	tlsCfg, err := parseRedisConf(spec.Conf).tlsConfig()
	if err != nil {
		return err
	}
	// Through the front, as the lab's clients reach the node; over TLS on a
	// TLS node (the front relays the handshake).
	opts := &redis.Options{
		Addr: "127.0.0.1:" + strconv.Itoa(spec.Port), MaxRetries: -1, PoolSize: 1,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		Username: auth.Name, Password: auth.Password,
	}
	redlock.WithTLS(tlsCfg)(opts)
	c := redis.NewClient(opts)
	defer c.Close()
	for {
		var st Status
		_ = readJSONFile(spec.path(statusFile), &st)
		mine := st.SupervisorPID == supervisorPID
		if mine && st.State == Stopped {
			return nil
		}
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := c.Ping(pctx).Err()
		pcancel()
		// A replicated node is up once its replica follows it too.
		replicaOK := !spec.hasReplica() || (st.Replica != nil && st.Replica.State == Up && st.Replica.Synced)
		if err == nil && mine && (st.State == Up || st.State == Paused) && replicaOK {
			return nil
		}
		if err == nil && !replicaOK {
			err = fmt.Errorf("replica not following yet (%+v)", st.Replica)
		} else if err == nil {
			err = fmt.Errorf("supervisor reports %q", st.State)
		}
		if !proc.Alive(supervisorPID) {
			log, _ := os.ReadFile(spec.path(supervisorLogFile))
			return fmt.Errorf("node %d: supervisor exited during start; end of %s:\n%s",
				spec.ID, spec.path(supervisorLogFile), tail(string(log), 1500))
		}
		select {
		case <-ctx.Done():
			// What the supervisor was doing, to tell a slow start from a hang.
			log, _ := os.ReadFile(spec.path(supervisorLogFile))
			var procs []string
			for _, pid := range proc.Scan(func(pid int) bool { return isSupervisor(pid, spec.StateDir, spec.ID) }) {
				procs = append(procs, fmt.Sprintf("pid %d [%s]", pid, proc.Threads(pid)))
			}
			return fmt.Errorf("node %d not answering on 127.0.0.1:%d: %w (last error: %v); supervisor processes (tid state wchan): %s; end of %s:\n%s",
				spec.ID, spec.Port, ctx.Err(), err, strings.Join(procs, ", "), spec.path(supervisorLogFile), tail(string(log), 1500))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops node id: its supervisor (SIGTERM; it shuts redis-server
// down cleanly and tells the restart guard), then anything a dead
// supervisor left: redis-server found by its working directory, a waiting
// restart guard. With purge it then removes stateDir/nodeN. Stopping a node
// that is not running succeeds.
func Stop(ctx context.Context, stateDir string, id int, purge bool) error {
	dir := Dir(stateDir, id)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	limit := stopTimeout + guardTimeout + 5*time.Second
	if fileExists(filepath.Join(dir, userDataFile)) {
		limit += 35 * time.Second // the machine's orderly shutdown (machine.Close)
	}
	errs := stopDaemons(ctx, fmt.Sprintf("node %d", id),
		proc.Scan(func(pid int) bool { return isSupervisor(pid, stateDir, id) }), limit, filepath.Join(dir, supervisorLogFile))

	if fileExists(filepath.Join(dir, userDataFile)) {
		// A machine node: its redis.conf's dir is the machine's, so no
		// process sweep by working directory (it would find other
		// machines' redis-servers); its leftovers are the machine, its
		// mounts and the NTP server.
		if err := sweepMachine(ctx, dir); err != nil {
			return errors.Join(append(errs, fmt.Errorf("node %d: %w", id, err))...)
		}
		// The machine's data volume, a power-loss mount its supervisor
		// served: dead if that supervisor died.
		if err := SweepDisks(dir); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
		}
		for _, f := range []string{supervisorPIDFile, redisPIDFile} {
			os.Remove(filepath.Join(dir, f))
		}
		if purge {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, fmt.Errorf("node %d: %w", id, err))
			}
		}
		return errors.Join(errs...)
	}
	dataDir := filepath.Join(dir, "data")
	if conf, err := os.ReadFile(filepath.Join(dir, confFile)); err == nil {
		if d := parseRedisConf(conf).dir; d != "" {
			dataDir = d
		}
	}
	guard := filepath.Join(dir, guardFile)
	for _, pid := range findMentioning(guard) {
		signalGroup(pid, syscall.SIGKILL)
		proc.WaitGone(context.Background(), pid, 5*time.Second)
	}
	// A replica left by a dead supervisor: no guard to tell, only stop it.
	if conf, err := os.ReadFile(filepath.Join(dir, replicaConfFile)); err == nil {
		if d := parseRedisConf(conf).dir; d != "" {
			for _, pid := range FindRedis(d) {
				signalGroup(pid, syscall.SIGTERM)
				signalGroup(pid, syscall.SIGCONT)
				if !proc.WaitGone(ctx, pid, stopTimeout) {
					signalGroup(pid, syscall.SIGKILL)
					proc.WaitGone(context.Background(), pid, 5*time.Second)
				}
			}
		}
	}
	for _, pid := range FindRedis(dataDir) {
		how := "clean"
		signalGroup(pid, syscall.SIGTERM)
		signalGroup(pid, syscall.SIGCONT)
		if !proc.WaitGone(ctx, pid, stopTimeout) {
			how = "unclean"
			signalGroup(pid, syscall.SIGKILL)
			proc.WaitGone(context.Background(), pid, 5*time.Second)
		}
		if fileExists(guard) {
			gctx, cancel := context.WithTimeout(ctx, guardTimeout)
			out, err := exec.CommandContext(gctx, "bash", guard, "post-stop", how).CombinedOutput()
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("node %d: restart guard post-stop: %w: %s", id, err, out))
			}
		}
	}
	if err := SweepDisks(dir); err != nil {
		errs = append(errs, fmt.Errorf("lab: node %d: %w", id, err))
	}
	for _, f := range []string{supervisorPIDFile, redisPIDFile, replicaPIDFile} {
		os.Remove(filepath.Join(dir, f))
	}
	if purge {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// tail returns the last n bytes of s (a supervisor's log, for an error).
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
