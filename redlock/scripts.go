package redlock

import (
	"context"
	_ "embed"
	"slices"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/extend.lua
	extendLua string

	releaseScript = script{src: releaseLua, sha: redis.NewScript(releaseLua).Hash()}
	extendScript  = script{src: extendLua, sha: redis.NewScript(extendLua).Hash()}
)

// script is a Lua script and its SHA1.
type script struct{ src, sha string }

// scriptCall is one call of a script on every node of a round: its
// arguments are built and boxed once for all the nodes (go-redis only reads
// a command's arguments), where redis.Script.Run builds and boxes them again
// for each node.
type scriptCall struct {
	s    script
	args []any // "evalsha", sha, numkeys, KEYS..., ARGV...
}

// call prepares a call of s with one key and argv.
func (s script) call(key string, argv ...any) scriptCall {
	args := make([]any, 0, 4+len(argv))
	args = append(args, "evalsha", s.sha, 1, key)
	return scriptCall{s: s, args: append(args, argv...)}
}

// run sends EVALSHA and falls back to EVAL on NOSCRIPT, as redis.Script.Run
// does, so a node that restarted (empty script cache) costs one extra round
// trip once. Both scripts answer an integer.
func (sc scriptCall) run(ctx context.Context, node *redis.Client) *redis.IntCmd {
	cmd := sc.send(ctx, node, sc.args)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return sc.eval(ctx, node)
	}
	return cmd
}

// eval sends the script itself (EVAL), in one round trip whatever the
// node's script cache holds.
func (sc scriptCall) eval(ctx context.Context, node *redis.Client) *redis.IntCmd {
	args := slices.Clone(sc.args)
	args[0], args[1] = "eval", sc.s.src
	return sc.send(ctx, node, args)
}

// send runs one call as an IntCmd: both scripts answer an integer, and a
// typed reply needs no interface value to hold it.
func (scriptCall) send(ctx context.Context, node *redis.Client, args []any) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	_ = node.Process(ctx, cmd)
	return cmd
}
