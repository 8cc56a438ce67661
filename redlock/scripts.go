package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/extend.lua
	extendLua string

	// Script.Run sends EVALSHA and falls back to EVAL on NOSCRIPT, so a node
	// that restarted (empty script cache) costs one extra round trip once.
	releaseScript = redis.NewScript(releaseLua)
	extendScript  = redis.NewScript(extendLua)
)
