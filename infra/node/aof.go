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
	"sync"
	"time"
)

// The power-loss model for appendfsync everysec: Redis writes every command
// to the AOF at once (into the page cache) and fsyncs about once a second, so
// a power cut loses what reached the file in the last second. The supervisor
// samples the sizes of the AOF's incr files often (aofSampleEvery) and, on a
// power loss, cuts each incr file back to its size in the newest sample taken
// at least EverysecWindow before the crash: what the node had written since
// is gone, what it had written before is kept.
//
// Redis 7 keeps a multi-part AOF: a directory (appenddirname) with a base
// file (the dataset at the last rewrite, fsynced by the rewrite), incr files
// with the commands since, and a manifest naming them. Only incr files take
// new writes; a file the manifest names that no kept sample knew was opened
// by a rewrite inside the window, so everything in it is cut.
//
// What the model does not add: under everysec Redis also acknowledges
// writes it has not written to the file yet, while the previous
// background fsync is still running (it postpones the write for up to two
// seconds). Those sit in redis-server's memory, so a kill -9 loses them as
// well as a power loss does; on a slow disk everysec can lose acknowledged
// writes even to a kill. The cut only ever removes what is on file.
const (
	// EverysecWindow is what a power loss of an everysec node loses: the
	// writes of its last second.
	EverysecWindow = time.Second
	aofSampleEvery = 50 * time.Millisecond
	// aofHistory is how much sample history is kept beyond the window; the
	// newest sample older than window+history always stays, so a stalled
	// sampler still leaves one to cut to.
	aofHistory = time.Second
)

// aofSample is the size of every incr file at one instant.
type aofSample struct {
	at    time.Time
	sizes map[string]int64 // incr file name -> size
}

// aofSampler keeps a short history of the incr files' sizes of one node.
// sample and cut hold mu for their whole run, so a cut never races a
// sample into recording a size from before the cut.
type aofSampler struct {
	dir      string // the AOF directory
	manifest string // the manifest's file name in dir

	mu      sync.Mutex
	samples []aofSample
}

func newAOFSampler(c redisConf) *aofSampler {
	return &aofSampler{dir: c.aofDir(), manifest: c.aofManifest()}
}

// run samples every interval until stop is closed.
func (a *aofSampler) run(stop <-chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	a.sample(time.Now())
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			a.sample(now)
		}
	}
}

// sample records the incr files' sizes now; a file that cannot be read
// (no AOF yet, a rewrite swapping files) is left out of this sample.
func (a *aofSampler) sample(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sampleLocked(now)
}

func (a *aofSampler) sampleLocked(now time.Time) {
	s := aofSample{at: now, sizes: map[string]int64{}}
	files, _ := readAOFManifest(filepath.Join(a.dir, a.manifest))
	for _, name := range files.incr {
		if fi, err := os.Stat(filepath.Join(a.dir, name)); err == nil {
			s.sizes[name] = fi.Size()
		}
	}
	a.samples = append(a.samples, s)
	// Drop a sample once a newer one is also older than the window plus
	// the history: no cut will need it.
	old := now.Add(-EverysecWindow - aofHistory)
	for len(a.samples) > 1 && !a.samples[1].at.After(old) {
		a.samples = a.samples[1:]
	}
}

// latest returns the newest sample, summed over the incr files.
func (a *aofSampler) latest() *AOFSample {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.samples) == 0 {
		return nil
	}
	s := a.samples[len(a.samples)-1]
	out := &AOFSample{At: s.at.UTC()}
	for _, n := range s.sizes {
		out.Bytes += n
	}
	return out
}

// keptAtLocked returns the newest sample taken at or before t, or the
// oldest one when none is that old (the sampler, with the process, started
// after t: everything the process wrote is newer than t).
func (a *aofSampler) keptAtLocked(t time.Time) (aofSample, bool) {
	if len(a.samples) == 0 {
		return aofSample{}, false
	}
	best := a.samples[0]
	for _, s := range a.samples {
		if s.at.After(t) {
			break
		}
		best = s
	}
	return best, true
}

// aofCut is what a power loss took from the AOF.
type aofCut struct {
	// KeptAt is when the sample the files were cut back to was taken.
	KeptAt time.Time
	// Bytes and Commands cut (Commands counts writes: MULTI, EXEC and
	// SELECT are not counted).
	Bytes, Commands int64
	// Files names the incr files that were cut.
	Files []string
	// Exact is false when a file could not be parsed and was cut at the
	// sampled size, possibly mid-command (Redis then drops the partial
	// command on load: aof-load-truncated, on by default).
	Exact bool
}

// cutAt models a power loss at crash: every incr file is cut back to its
// size in the newest sample taken at or before crash-window, at a command
// boundary outside MULTI/EXEC. It then starts the history afresh (the files
// shrank). The caller has made sure redis-server is not running.
func (a *aofSampler) cutAt(crash time.Time, window time.Duration) (aofCut, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer func() {
		a.samples = nil
		a.sampleLocked(time.Now())
	}()
	keep, ok := a.keptAtLocked(crash.Add(-window))
	if !ok {
		return aofCut{}, fmt.Errorf("node: power loss: no AOF sample to cut back to")
	}
	files, err := readAOFManifest(filepath.Join(a.dir, a.manifest))
	if errors.Is(err, os.ErrNotExist) {
		return aofCut{KeptAt: keep.at, Exact: true}, nil // no AOF: nothing written
	}
	if err != nil {
		return aofCut{}, err
	}
	cut := aofCut{KeptAt: keep.at, Exact: true}
	for _, name := range files.incr {
		res, err := truncateAOF(filepath.Join(a.dir, name), keep.sizes[name])
		if err != nil {
			return cut, err
		}
		if res.bytes > 0 {
			cut.Files = append(cut.Files, name)
			cut.Bytes += res.bytes
			cut.Commands += res.commands
			cut.Exact = cut.Exact && res.exact
		}
	}
	return cut, nil
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

// truncation is what truncateAOF did to one file.
type truncation struct {
	bytes, commands int64
	exact           bool
}

// truncateAOF cuts the AOF file at path to the last command boundary at or
// before size that is not inside MULTI/EXEC. A file already that short is
// left alone. A file that cannot be parsed is cut at size.
func truncateAOF(path string, size int64) (truncation, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return truncation{}, fmt.Errorf("node: power loss: %w", err)
	}
	if fi.Size() <= size {
		return truncation{exact: true}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return truncation{}, fmt.Errorf("node: power loss: %w", err)
	}
	cmds, perr := aofCommands(f)
	f.Close()
	at, exact := size, perr == nil
	if exact {
		at = 0
		for _, c := range cmds {
			if c.cuttable && c.end <= size {
				at = c.end
			}
		}
	}
	var commands int64
	for _, c := range cmds {
		if c.write && c.end > at {
			commands++
		}
	}
	if err := os.Truncate(path, at); err != nil {
		return truncation{}, fmt.Errorf("node: power loss: %w", err)
	}
	return truncation{bytes: fi.Size() - at, commands: commands, exact: exact}, nil
}

// aofCommand is one command in an AOF file.
type aofCommand struct {
	end int64 // the offset just after it
	// write is false for MULTI, EXEC and SELECT.
	write bool
	// cuttable: the file may end here. Not inside MULTI/EXEC, where a cut
	// would leave a transaction open (Redis refuses that in any file but
	// the last, and drops the transaction in the last).
	cuttable bool
}

// aofCommands parses a file of RESP commands (an incr file, or an AOF
// without RDB preamble) and returns each complete command. A partial
// command at the end (a write in progress) is left out.
func aofCommands(r io.Reader) ([]aofCommand, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		out   []aofCommand
		off   int64
		multi bool
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
		c := aofCommand{end: off, write: cmd != "MULTI" && cmd != "EXEC" && cmd != "SELECT"}
		switch {
		case cmd == "MULTI":
			multi = true
		case multi && cmd == "EXEC":
			multi = false
			c.cuttable = true
		case !multi:
			c.cuttable = true
		}
		out = append(out, c)
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

// AOFIncrBytes is the size of the node's AOF incr files on disk now: what
// the power-loss model samples (a machine's, below its mounted root).
func (s Spec) AOFIncrBytes() (int64, error) {
	conf := s.hostConf()
	files, err := readAOFManifest(filepath.Join(conf.aofDir(), conf.aofManifest()))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range files.incr {
		fi, err := os.Stat(filepath.Join(conf.aofDir(), f))
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}
