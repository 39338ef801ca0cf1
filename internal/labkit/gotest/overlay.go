package gotest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Overlay is a set of file replacements handed to `go test -overlay`: the
// build sees the replaced content at the original path, so a patched or
// restored package compiles in place, inside the module, without touching
// the working tree.
type Overlay struct {
	dir     string
	n       int
	Replace map[string]string
}

// NewOverlay creates an empty overlay backed by a temporary directory.
func NewOverlay() (*Overlay, error) {
	dir, err := os.MkdirTemp("", "labctl-overlay-")
	if err != nil {
		return nil, err
	}
	return &Overlay{dir: dir, Replace: map[string]string{}}, nil
}

// Set makes the build see content at path (absolute).
func (o *Overlay) Set(path string, content []byte) error {
	o.n++
	tmp := filepath.Join(o.dir, strconv.Itoa(o.n)+"-"+filepath.Base(path))
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		return err
	}
	o.Replace[path] = tmp
	return nil
}

// Delete makes the build act as if path (absolute) did not exist.
func (o *Overlay) Delete(path string) { o.Replace[path] = "" }

// File writes the overlay description and returns its path for -overlay.
func (o *Overlay) File() (string, error) {
	b, err := json.Marshal(struct{ Replace map[string]string }{o.Replace})
	if err != nil {
		return "", err
	}
	p := filepath.Join(o.dir, "overlay.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", fmt.Errorf("write overlay: %w", err)
	}
	return p, nil
}

// Close removes the overlay's temporary files.
func (o *Overlay) Close() error { return os.RemoveAll(o.dir) }
