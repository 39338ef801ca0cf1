package catalog

import (
	"fmt"
	"io"
	"path"
	"strings"
)

// KitArchive is where a test-writing template keeps the track's kit,
// relative to the root: every lab's reference, the test helpers and the
// shipped mutants, which labctl lays out for the learner at every run.
const KitArchive = "write/kit.tar.gz"

// maxKitBytes bounds what reading the kit archive may inflate to.
const maxKitBytes = 32 << 20

// The kit archive of a template: NN-topic/ref/NAME, NN-topic/helpers/NAME,
// NN-topic/mutants/NAME.patch. Entries sorted, no times or owners, so the
// same kit gives the same bytes.

// WriteKitArchive writes labs (lab directory → "ref/NAME" |
// "helpers/NAME" | "mutants/NAME.patch" → content) as a gzipped tar.
func WriteKitArchive(w io.Writer, labs map[string]map[string][]byte) error {
	flat := map[string][]byte{}
	for dir, files := range labs {
		for rel, content := range files {
			flat[dir+"/"+rel] = content
		}
	}
	return writeArchive(w, flat, checkKitName)
}

// ReadKitArchive reads what WriteKitArchive wrote: lab directory →
// "ref/NAME" | "helpers/NAME" | "mutants/NAME.patch" → content.
func ReadKitArchive(r io.Reader) (map[string]map[string][]byte, error) {
	flat, err := readArchive(r, maxKitBytes, checkKitName)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string][]byte{}
	for p, content := range flat {
		dir, rest, _ := strings.Cut(p, "/")
		if out[dir] == nil {
			out[dir] = map[string][]byte{}
		}
		out[dir][rest] = content
	}
	return out, nil
}

// checkKitName accepts exactly "lab-dir/(ref|helpers|mutants)/name".
func checkKitName(p string) error {
	parts := strings.Split(p, "/")
	ok := len(parts) == 3 && parts[0] != "" && parts[0] != "." && parts[0] != ".." &&
		(parts[1] == "ref" || parts[1] == "helpers" || parts[1] == "mutants") &&
		parts[2] != "" && parts[2] != "." && parts[2] != ".." && !strings.Contains(parts[2], `\`) && path.Clean(p) == p
	if ok && parts[1] == "mutants" {
		ok = strings.HasSuffix(parts[2], ".patch")
	}
	if ok && parts[1] == "helpers" {
		ok = strings.HasSuffix(parts[2], "_test.go")
	}
	if ok && parts[1] == "ref" {
		ok = !strings.HasSuffix(parts[2], "_test.go")
	}
	if !ok {
		return fmt.Errorf("entry %q is not lab-directory/{ref,helpers,mutants}/name", p)
	}
	return nil
}
