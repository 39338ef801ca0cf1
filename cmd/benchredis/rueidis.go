package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// rueidisScripter runs lab 07's limiter on rueidis as it comes (its
// default connections, every call through them, a lone one too), for the
// side-by-side the performance notes report: what gateway/redispipe
// changes by using one connection and sending a lone call on go-redis. It
// implements what redis.Script.Run uses: EVALSHA, and EVAL when the reply
// says NOSCRIPT.
type rueidisScripter struct{ c rueidis.Client }

var _ redis.Scripter = rueidisScripter{}

func newRueidis(url string) (rueidisScripter, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return rueidisScripter{}, err
	}
	opt.DisableCache = true // no client-side caching: the limiter's keys change on every call
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return rueidisScripter{}, err
	}
	return rueidisScripter{c}, nil
}

func (r rueidisScripter) close() { r.c.Close() }

func (r rueidisScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return r.do(ctx, "evalsha", r.c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build())
}

func (r rueidisScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.do(ctx, "eval", r.c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(strs(args)...).Build())
}

func strs(args []any) []string {
	strs := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			strs[i] = v
		case int:
			strs[i] = strconv.Itoa(v)
		case int64:
			strs[i] = strconv.FormatInt(v, 10)
		case float64:
			strs[i] = strconv.FormatFloat(v, 'f', -1, 64)
		default:
			strs[i] = fmt.Sprint(v)
		}
	}
	return strs
}

// noScript is a NOSCRIPT reply as go-redis's Script.Run recognises one.
type noScript struct{ error }

func (noScript) RedisError() {}

func (r rueidisScripter) do(ctx context.Context, name string, c rueidis.Completed) *redis.Cmd {
	cmd := redis.NewCmd(ctx, name)
	arr, err := r.c.Do(ctx, c).ToArray()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOSCRIPT") {
			err = noScript{err}
		}
		cmd.SetErr(err)
		return cmd
	}
	vals := make([]any, len(arr))
	for i := range arr {
		n, err := arr[i].AsInt64()
		if err != nil {
			cmd.SetErr(err)
			return cmd
		}
		vals[i] = n
	}
	cmd.SetVal(vals)
	return cmd
}

var errUnused = errors.New("benchredis: not used by the limiter")

func (r rueidisScripter) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, "eval_ro")
	cmd.SetErr(errUnused)
	return cmd
}

func (r rueidisScripter) EvalShaRO(ctx context.Context, s string, k []string, a ...any) *redis.Cmd {
	return r.EvalRO(ctx, s, k, a...)
}

func (r rueidisScripter) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	cmd := redis.NewBoolSliceCmd(ctx)
	cmd.SetErr(errUnused)
	return cmd
}

func (r rueidisScripter) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx)
	v, err := r.c.Do(ctx, r.c.B().ScriptLoad().Script(src).Build()).ToString()
	cmd.SetVal(v)
	cmd.SetErr(err)
	return cmd
}
