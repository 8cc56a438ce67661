package node

// What the external tests (package node_test, which can use
// internal/faultcheck) need of the package's internals.

// FindRedis is findRedis.
var FindRedis = findRedis

// The node directory's files.
const (
	ConfFile          = confFile
	FreshMarker       = freshMarker
	StatusFile        = statusFile
	SupervisorPIDFile = supervisorPIDFile
	RedisPIDFile      = redisPIDFile
)

// Path is a file in the node's directory.
func (s Spec) Path(name string) string { return s.path(name) }

// DataDir is the dir of a rendered redis.conf.
func DataDir(conf []byte) string { return parseRedisConf(conf).dir }

// FileExists is fileExists.
var FileExists = fileExists

// ReadJSONFile is readJSONFile.
var ReadJSONFile = readJSONFile
