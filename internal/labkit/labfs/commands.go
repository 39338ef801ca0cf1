package labfs

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// GitFiles reads the files directly in dir (relative to root) as they are at
// ref, keeping those whose base name keep accepts: base name → content.
func GitFiles(ctx context.Context, root, ref, dir string, keep func(name string) bool) (map[string][]byte, error) {
	out, err := GitOutput(ctx, root, "ls-tree", "--name-only", ref, filepath.ToSlash(dir)+"/")
	if err != nil {
		return nil, fmt.Errorf("list %s at %s: %w", dir, ref, err)
	}
	files := map[string][]byte{}
	for _, p := range strings.Fields(string(out)) {
		if !keep(path.Base(p)) {
			continue
		}
		content, err := GitOutput(ctx, root, "show", ref+":"+p)
		if err != nil {
			return nil, fmt.Errorf("read %s at %s: %w", p, ref, err)
		}
		files[path.Base(p)] = content
	}
	return files, nil
}

func GitOutput(ctx context.Context, root string, args ...string) ([]byte, error) {
	return CommandOutput(ctx, root, "git", args...)
}

// CommandOutput runs a command in dir and returns its standard output; a
// failure carries what the command said on standard error.
func CommandOutput(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
	}
	return out, err
}

// GoOutput runs the go command in root and returns its standard output.
func GoOutput(ctx context.Context, root string, args ...string) ([]byte, error) {
	return CommandOutput(ctx, root, "go", args...)
}
