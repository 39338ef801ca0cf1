package labkit

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// gitFiles reads the files directly in dir (relative to root) as they are at
// ref, keeping those whose base name keep accepts: base name → content.
func gitFiles(ctx context.Context, root, ref, dir string, keep func(name string) bool) (map[string][]byte, error) {
	out, err := gitOutput(ctx, root, "ls-tree", "--name-only", ref, filepath.ToSlash(dir)+"/")
	if err != nil {
		return nil, fmt.Errorf("list %s at %s: %w", dir, ref, err)
	}
	files := map[string][]byte{}
	for _, p := range strings.Fields(string(out)) {
		if !keep(path.Base(p)) {
			continue
		}
		content, err := gitOutput(ctx, root, "show", ref+":"+p)
		if err != nil {
			return nil, fmt.Errorf("read %s at %s: %w", p, ref, err)
		}
		files[path.Base(p)] = content
	}
	return files, nil
}

func gitOutput(ctx context.Context, root string, args ...string) ([]byte, error) {
	return commandOutput(ctx, root, "git", args...)
}

// commandOutput runs a command in dir and returns its standard output; a
// failure carries what the command said on standard error.
func commandOutput(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
	}
	return out, err
}
