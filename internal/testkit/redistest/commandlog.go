package redistest

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// CommandLog is a go-redis hook that records the name of every command a
// client sends, lower case ("evalsha", "eval"), so a test can say how many
// round trips an operation took:
//
//	var log redistest.CommandLog
//	rdb.AddHook(&log)
type CommandLog struct {
	mu    sync.Mutex
	names []string
}

// DialHook passes dials through.
func (c *CommandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook passes pipelines through unrecorded.
func (c *CommandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook records each command's name, then sends it.
func (c *CommandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.names = append(c.names, strings.ToLower(cmd.Name()))
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

// Take returns the commands recorded since the last Take and forgets them.
func (c *CommandLog) Take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	return out
}
