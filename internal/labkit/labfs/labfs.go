// Package labfs is the plumbing under labctl's packages, with no notion of
// a lab: whether a path is a directory, the git and go commands they run
// (GitFiles, GitOutput, GoOutput), the content hashes that key their caches,
// and the small JSON files those caches keep (LoadJSON, StoreJSON).
package labfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
)

// IsDir reports whether p is a directory.
func IsDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// HashFile adds a file's name and content to h.
func HashFile(h hash.Hash, root, rel string) error {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(b))
	h.Write(b)
	return nil
}

// HashTree hashes every file under root/rel; a missing tree hashes empty.
func HashTree(h hash.Hash, root, rel string) error {
	return filepath.WalkDir(filepath.Join(root, rel), func(p string, d os.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		r, _ := filepath.Rel(root, p)
		return HashFile(h, root, r)
	})
}

// LoadJSON reads the value stored under key in dir (StoreJSON) into v;
// false when there is none, it does not read, or key is "".
func LoadJSON(dir, key string, v any) bool {
	if key == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, key+".json"))
	return err == nil && json.Unmarshal(b, v) == nil
}

// StoreJSON stores v under key in dir, as key.json, written whole or not at
// all (a temporary file renamed into place), and not when key is "". A
// failed write is not an error: what is stored is a cache, and a value
// missing from it only costs a rerun next time.
func StoreJSON(dir, key string, v any) {
	if key == "" {
		return
	}
	b, err := json.Marshal(v)
	if err != nil || os.MkdirAll(dir, 0o755) != nil {
		return
	}
	tmp, err := os.CreateTemp(dir, key+"-*.tmp")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	if cerr := tmp.Close(); werr != nil || cerr != nil {
		os.Remove(tmp.Name())
		return
	}
	if os.Rename(tmp.Name(), filepath.Join(dir, key+".json")) != nil {
		os.Remove(tmp.Name())
	}
}
