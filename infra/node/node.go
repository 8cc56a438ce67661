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

	"github.com/redlocklab/redlocklab/internal/proc"
	"github.com/redlocklab/redlocklab/internal/redirect"
	"github.com/redlocklab/redlocklab/redlock"
)

// Prepare writes the node's spec, rendered redis.conf and restart guard
// into stateDir/nodeN and creates the directories the configuration names.
// A node directory created here is marked fresh (see Run).
func Prepare(spec Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	dir, c := spec.dir(), nodeDaemon(spec.StateDir, spec.ID)
	if spec.Machine != nil {
		// The rendered dir is inside the machine: nothing to make here.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		return c.writeSpec(spec, daemonFile{confFile, &spec.Conf, 0o600}, daemonFile{guardFile, &spec.Guard, 0o644},
			daemonFile{userDataFile, &spec.Machine.UserData, 0o600})
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
	files := []daemonFile{{confFile, &spec.Conf, 0o644}, {guardFile, &spec.Guard, 0o755}}
	if spec.hasReplica() {
		if err := os.MkdirAll(parseRedisConf(spec.ReplicaConf).dir, 0o755); err != nil {
			return fmt.Errorf("node %d replica data dir: %w", spec.ID, err)
		}
		files = append(files, daemonFile{replicaConfFile, &spec.ReplicaConf, 0o644})
	} else {
		os.Remove(spec.path(replicaConfFile))
	}
	return c.writeSpec(spec, files...)
}

// LoadSpec reads what Prepare wrote.
func LoadSpec(stateDir string, id int) (Spec, error) {
	var spec Spec
	err := nodeDaemon(stateDir, id).readSpec(&spec, func() []daemonFile {
		files := []daemonFile{{name: confFile, b: &spec.Conf}, {name: guardFile, b: &spec.Guard}}
		if spec.Machine != nil {
			files = append(files, daemonFile{name: userDataFile, b: &spec.Machine.UserData})
		}
		if spec.ReplicaPort != 0 {
			files = append(files, daemonFile{name: replicaConfFile, b: &spec.ReplicaConf})
		}
		return files
	})
	if err != nil {
		return spec, err
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
	// Already supervised: whatever state it is in is its business.
	pid, err := nodeDaemon(spec.StateDir, id).launch(redlab)
	if err != nil || pid == 0 {
		return err
	}
	return WaitUp(ctx, spec, pid)
}

// WaitUp waits until supervisor supervisorPID (a Start's, or a Run in this
// process) reports the node up and it answers through its proxy (or
// reports it stopped: a node stopped on purpose stays stopped across a
// supervisor restart), failing early with the end of the supervisor's log
// when the supervisor exits.
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
	d := nodeDaemon(spec.StateDir, spec.ID)
	return awaitStarted(ctx, d, supervisorPID, func(st Status) error {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer pcancel()
		switch err := c.Ping(pctx).Err(); {
		case err != nil:
			return err
		case spec.hasReplica() && (st.Replica == nil || st.Replica.State != Up || !st.Replica.Synced):
			// A replicated node is up once its replica follows it too.
			return fmt.Errorf("replica not following yet (%+v)", st.Replica)
		case st.State != Up && st.State != Paused:
			return fmt.Errorf("supervisor reports %q", st.State)
		}
		return nil
	}, func(why error) error {
		// What the supervisor was doing, to tell a slow start from a hang.
		var procs []string
		for _, pid := range d.supervisors() {
			procs = append(procs, fmt.Sprintf("pid %d [%s]", pid, proc.Threads(pid)))
		}
		err := fmt.Errorf("node %d not answering on 127.0.0.1:%d: %w (last error: %v); supervisor processes (tid state wchan): %s; end of %s:\n%s",
			spec.ID, spec.Port, ctx.Err(), why, strings.Join(procs, ", "), d.logFile(), d.logTail(1500))
		if rc := parseRedisConf(spec.ReplicaConf); spec.hasReplica() && rc.logFile != "" {
			// Why the replica does not follow is in its own log.
			b, _ := os.ReadFile(rc.logFile)
			err = fmt.Errorf("%w\nend of %s:\n%s", err, rc.logFile, tail(string(b), 1500))
		}
		return err
	})
}

// Stop stops node id: its supervisor (SIGTERM; it shuts redis-server
// down cleanly and tells the restart guard), then anything a dead
// supervisor left: redis-server found by its working directory, a waiting
// restart guard. With purge it then removes stateDir/nodeN. Stopping a node
// that is not running succeeds.
func Stop(ctx context.Context, stateDir string, id int, purge bool) error {
	dir := Dir(stateDir, id)
	limit := stopTimeout + guardTimeout + 5*time.Second
	sweep := func(ctx context.Context) []error { return sweepNode(ctx, dir, id) }
	if fileExists(filepath.Join(dir, userDataFile)) {
		limit += 35 * time.Second // the machine's orderly shutdown (machine.Close)
		sweep = func(ctx context.Context) []error { return sweepMachineNode(ctx, dir, id) }
	}
	return nodeDaemon(stateDir, id).stop(ctx, limit, purge, sweep, redisPIDFile, replicaPIDFile)
}

// sweepMachineNode ends what a dead supervisor of a machine node left: its
// redis.conf's dir is the machine's, so no process sweep by working
// directory (it would find other machines' redis-servers); its leftovers
// are the machine, its mounts and the NTP server, and its data volume, a
// power-loss mount its supervisor served.
func sweepMachineNode(ctx context.Context, dir string, id int) []error {
	if err := sweepMachine(ctx, dir); err != nil {
		return []error{fmt.Errorf("node %d: %w", id, err)}
	}
	if err := SweepDisks(dir); err != nil {
		return []error{fmt.Errorf("node %d: %w", id, err)}
	}
	return nil
}

// sweepNode ends what a dead supervisor of a process node left: a waiting
// restart guard, the replica, redis-server found by its working directory
// (and tells the guard how it stopped), a dead power-loss mount.
func sweepNode(ctx context.Context, dir string, id int) []error {
	var errs []error
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
				stopOrphan(ctx, pid)
			}
		}
	}
	for _, pid := range FindRedis(dataDir) {
		how := cleanness(stopOrphan(ctx, pid))
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
	// The kernel redirect of its front, which a supervisor killed by
	// SIGKILL could not remove.
	if front := specPorts(dir, func(s Spec) []int { return []int{s.Port} }); len(front) == 1 && front[0] != 0 {
		if err := redirect.Release(ctx, front[0]); err != nil {
			errs = append(errs, fmt.Errorf("lab: node %d: %w", id, err))
		}
	}
	return errs
}

// stopOrphan stops a redis-server whose supervisor is gone (SIGTERM, and
// SIGCONT in case it was paused; SIGKILL after stopTimeout) and says
// whether it stopped cleanly.
func stopOrphan(ctx context.Context, pid int) (clean bool) {
	signalGroup(pid, syscall.SIGTERM)
	signalGroup(pid, syscall.SIGCONT)
	if proc.WaitGone(ctx, pid, stopTimeout) {
		return true
	}
	signalGroup(pid, syscall.SIGKILL)
	proc.WaitGone(context.Background(), pid, 5*time.Second)
	return false
}

// tail returns the last n bytes of s (a supervisor's log, for an error).
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
