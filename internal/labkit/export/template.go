package export

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/grade"
	"github.com/production-go/gateway-lab/internal/labkit/write"
)

// templatePart is one line of what a template holds: the paths it covers
// and what it says about them.
type templatePart struct {
	// Paths are slash-separated: a file ("go.mod"), a pattern path.Match
	// reads ("labs/*/README.md"), or a tree ("docs/", "labs/*/": every
	// file under a directory the pattern matches).
	Paths []string
	Says  string
	// Generated parts are written by Run, not copied from the course.
	Generated bool
	// NoTests leaves out the part's _test.go files and testdata/
	// directories: they test the tools, which a learner does not maintain.
	NoTests bool
}

// templateSpec is what one track's template holds and leaves out, what a
// grade in it certifies, and how its files read; the template's README,
// the instructor guide and `labctl export -h` all say it from here, and
// TestEachTemplateHoldsWhatItsSpecSays holds it against a real export.
type templateSpec struct {
	Track     catalog.Track
	Name      string // "the labs template"
	Holds     []templatePart
	Lacks     []string
	Targets   []string // the Makefile targets it keeps
	Certifies string   // what a grade in it certifies
	// LessonNotice opens each lesson (labs/NN-topic/README.md).
	LessonNotice string
	Start        string // the first command
	answers      func(root string, c *catalog.Catalog) ([]Needle, error)
}

// Parts every template holds alike.
var (
	commonDocs  = templatePart{Paths: []string{"docs/", "checklist/", "deploy/"}, Says: "`docs/`, `checklist/`, `deploy/`: the course's other lessons, the production-readiness checklist and the manifests the docs link to"}
	commonTools = templatePart{Paths: []string{"cmd/labctl/", "internal/"}, NoTests: true, Says: "`cmd/labctl/`, `internal/`: labctl and the packages the labs import, without their own tests"}
	commonMod   = templatePart{Paths: []string{"go.mod", "go.sum"}, Says: "`go.mod`, `go.sum`: cut by `go mod tidy` to what the template imports, without the maintainers' tools"}
	commonMeta  = templatePart{Paths: []string{".gitignore"}, Says: "`.gitignore`: what git leaves out (labctl's caches, reports, built tools)"}
	commonGrade = templatePart{Paths: []string{".github/workflows/grade.yml"}, Says: "`.github/workflows/grade.yml`: grading on every push, with the reports on the run's page"}
	commonLacks = "the apps (`production_app`, `secure_app`), `scripts/`, `docker-compose.yml`, the maintainers' CI and Make targets, the tools' own tests"
)

// templateSpecs are the two templates.
var templateSpecs = []*templateSpec{
	{
		Track: catalog.TrackLabs,
		Name:  "the labs template",
		Holds: []templatePart{
			{Paths: []string{"labs/catalog.json", "labs/*/"}, Says: "`labs/`: every lab's stubs, lesson (`README.md`), hints (`HINTS.md`) and exercise tests"},
			{Paths: []string{catalog.PristineArchive}, Generated: true, Says: "`" + catalog.PristineArchive + "`: the exercise tests, packed: what grading and the edited-tests banner compare against"},
			{Paths: []string{grade.AutogradingFile}, Generated: true, Says: "`" + grade.AutogradingFile + "`: one graded command per exercise test"},
			commonDocs, commonTools, commonMod, commonMeta, commonGrade,
			{Paths: []string{"Makefile"}, Says: "`Makefile`: `make lab-NN`, `progress`, `hint`, `watch`, `prove`, `interview`, `grade`, `clean`"},
			{Paths: []string{"README.md"}, Says: "`README.md`: the course's README under a notice of what this template holds"},
		},
		Lacks: []string{
			"any lab's reference or mutant, in any form: `labctl export` searches every file it writes, archives unpacked and encodings undone, for the code of every reference function, script and mutant, and refuses to finish if it finds one",
			"the test-writing track, which is a template of its own (`labctl export -track write`): its kit is every reference",
			commonLacks,
		},
		Targets:   []string{"help", "$(LABCTL)", "$(LABS)", "progress", "hint", "watch", "prove", "interview", "grade", "clean"},
		Certifies: "which exercise tests the learner's code passes (and held-back tests, if you add them), graded with the pristine tests restored. No reference or mutant of any lab is in the template, so the code came from the learner or from outside it. Near-solutions opened come from labctl's record in `.labctl/hints.json`, which the learner can delete or rewrite: information, not proof; the hints themselves are readable in `HINTS.md`.",
		LessonNotice: "> **Learner edition: the labs.** Everything this lab needs is here. Where the lesson points at\n" +
			"> `solutions/` (the reference, its `testdata/mutants/`), at `make run` or the apps, or at the\n" +
			"> test-writing track (`make write-NN`), those are not in this template.\n\n",
		Start:   "make lab-01",
		answers: ImplementationAnswers,
	},
	{
		Track: catalog.TrackWrite,
		Name:  "the test-writing template",
		Holds: []templatePart{
			{Paths: []string{"labs/catalog.json", "labs/*/README.md"}, Says: "`labs/*/README.md`: every lab's lesson, the contract your tests pin (no stubs, hints or exercise tests)"},
			{Paths: []string{"write/*/" + write.File}, Says: "`write/NN-topic/" + write.File + "`: your test file for each lab, the only file of the track you edit"},
			{Paths: []string{catalog.KitArchive}, Generated: true, Says: "`" + catalog.KitArchive + "`: every lab's reference, the test helpers you may use and the shipped mutants, packed; `make write-NN` lays the reference next to your file"},
			commonDocs, commonTools, commonMod, commonMeta, commonGrade,
			{Paths: []string{"Makefile"}, Says: "`Makefile`: `make write-NN`, `progress`, `interview`, `grade`, `clean`"},
			{Paths: []string{"README.md"}, Says: "`README.md`: the course's README under a notice of what this template holds"},
		},
		Lacks: []string{
			"any lab's exercise tests or a suite written cold, in any form: these are this track's answers, and `labctl export` searches every file it writes for them, archives unpacked and encodings undone, and refuses to finish if it finds one",
			"the labs' stubs and hints: the labs track is a template of its own (`labctl export`)",
			commonLacks,
		},
		Targets:   []string{"help", "$(LABCTL)", "$(WRITES)", "progress", "interview", "grade", "clean"},
		Certifies: "how many mutants the learner's tests kill, each mutant built on its own, counting only failed assertions on code the tests pass on. The references are here by design, and so are the shipped mutants (a learner who unpacks the kit can read them; `labctl write --show` prints one only once it is killed, as a courtesy, not a lock): the shipped score says the tests catch the classic bugs the course names, and only a held-back bank (`--mutants`) says they catch bugs the learner never saw.",
		LessonNotice: "> **Learner edition: the test-writing track.** This lesson is the contract your tests pin.\n" +
			"> Its stubs, hints and exercise tests are not in this template; `make write-NN` lays the\n" +
			"> reference next to `write/NN-topic/" + write.File + "`. Where the lesson points at `solutions/`,\n" +
			"> `make lab-NN` or the apps, those live in the course repository.\n\n",
		Start:   "make write-01",
		answers: WriteAnswers,
	},
}

// TemplateNotice is what opens the README of the track's template written
// from that commit.
func TemplateNotice(t catalog.Track, commit string) string {
	s, err := specOf(t)
	if err != nil {
		return ""
	}
	return s.Notice(commit)
}

// TemplateName is what the track's template is called: "the labs template".
func TemplateName(t catalog.Track) string {
	if s, err := specOf(t); err == nil {
		return s.Name
	}
	return string(t)
}

// specOf finds a track's template; the empty track is TrackLabs.
func specOf(t catalog.Track) (*templateSpec, error) {
	if t == "" {
		t = catalog.TrackLabs
	}
	for _, s := range templateSpecs {
		if s.Track == t {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w: no track %q (the tracks: %s)", catalog.ErrBadOption, t, trackNames())
}

func trackNames() string {
	var names []string
	for _, t := range catalog.Tracks {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}

// covers reports whether a template path belongs to the part.
func (p templatePart) covers(rel string) bool {
	if p.NoTests && (strings.HasSuffix(rel, "_test.go") || slices.Contains(strings.Split(rel, "/"), "testdata")) {
		return false
	}
	return slices.ContainsFunc(p.Paths, func(pat string) bool { return matchPath(pat, rel) })
}

// matchPath matches a slash-separated path against a part's pattern: a
// trailing slash matches every file under the directories the rest
// matches; otherwise segment for segment, as path.Match does.
func matchPath(pattern, rel string) bool {
	tree := strings.HasSuffix(pattern, "/")
	pat := strings.Split(strings.TrimSuffix(pattern, "/"), "/")
	segs := strings.Split(rel, "/")
	if len(segs) < len(pat) || (!tree && len(segs) != len(pat)) || (tree && len(segs) == len(pat)) {
		return false
	}
	for i, p := range pat {
		if ok, err := path.Match(p, segs[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// part returns the part that covers rel, if any.
func (s *templateSpec) part(rel string) (templatePart, bool) {
	for _, p := range s.Holds {
		if p.covers(rel) {
			return p, true
		}
	}
	return templatePart{}, false
}

// copies reports whether a course file goes into the template as a copy:
// a part covers it and Run does not write it itself. No file under a
// solutions/ or mutants/ directory is ever copied, whatever a part says.
func (s *templateSpec) copies(rel string) bool {
	segs := strings.Split(rel, "/")
	if slices.Contains(segs, "solutions") || slices.Contains(segs, "mutants") {
		return false
	}
	p, ok := s.part(rel)
	return ok && !p.Generated
}

// Contents is what the template holds and leaves out, as Markdown bullets.
func (s *templateSpec) Contents() string {
	var b strings.Builder
	b.WriteString("It holds:\n\n")
	for _, p := range s.Holds {
		fmt.Fprintf(&b, "- %s\n", p.Says)
	}
	b.WriteString("\nIt does not hold:\n\n")
	for _, l := range s.Lacks {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	return b.String()
}

// Notice opens the template's README: which template this is, what it
// holds and leaves out, and where to start.
func (s *templateSpec) Notice(commit string) string {
	from := "the course repository"
	if commit != "" {
		from = "commit " + commit[:min(12, len(commit))] + " of the course repository"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "> **Learner edition: %s**, written by `labctl export -track %s` from %s.\n>\n", s.Name, s.Track, from)
	for line := range strings.Lines(s.Contents()) {
		b.WriteString(strings.TrimRight("> "+line, " \n") + "\n")
	}
	fmt.Fprintf(&b, ">\n> A grade here certifies %s\n>\n> Start with `%s`. Where this README or `docs/` point at what is not here, it lives in the course repository.\n\n", s.Certifies, s.Start)
	return b.String()
}

// TemplateContents is, for `labctl export -h` and the instructor guide,
// what each template holds and leaves out and what a grade in it
// certifies, as Markdown.
func TemplateContents() string {
	var b strings.Builder
	for i, s := range templateSpecs {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "**%s** (`labctl export -track %s DIR`). ", capitalize(s.Name), s.Track)
		b.WriteString(s.Contents())
		fmt.Fprintf(&b, "\nA grade in it certifies %s\n", s.Certifies)
	}
	return b.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// CheckTemplateContents holds a template's files (slash-separated, from
// its root) to its track's spec: the files no part covers, and the paths
// of the spec that match no file.
func CheckTemplateContents(t catalog.Track, files []string) (uncovered, unused []string) {
	s, err := specOf(t)
	if err != nil {
		return files, nil
	}
	for _, f := range files {
		if _, ok := s.part(f); !ok {
			uncovered = append(uncovered, f)
		}
	}
	for _, p := range s.Holds {
		for _, pat := range p.Paths {
			if !slices.ContainsFunc(files, func(f string) bool { return p.covers(f) && matchPath(pat, f) }) {
				unused = append(unused, pat)
			}
		}
	}
	return uncovered, unused
}
