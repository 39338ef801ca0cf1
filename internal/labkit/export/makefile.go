package export

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// learnerMakefile cuts the course Makefile down to a template's targets
// (its templateSpec's Targets). It works on paragraphs — runs of lines
// between blank lines, a rule with the comment above it, a block of
// variables — and keeps:
//
//   - every paragraph that defines a learner target;
//   - the variables and exports those paragraphs use (transitively);
//   - .PHONY, listing only the targets that remain;
//   - a comment-only paragraph (a section heading) when the paragraph after
//     it stays, and the file's opening comment.
//
// It returns the Makefile and the targets it dropped. A learner target
// that depends on a dropped one is an error: the template would not work,
// and the list of learner targets needs a look.
func learnerMakefile(src []byte, targets []string) ([]byte, []string, error) {
	m := newMakefileCut(src)
	m.keepLearnerRules(targets)
	if err := m.refuseDroppedPrereqs(); err != nil {
		return nil, nil, err
	}
	m.keepUsedVariables()
	m.keepPhonyAndHeadings()
	out := m.render()
	slices.Sort(m.dropped)
	m.dropped = slices.Compact(m.dropped) // a target with two rules (ci: deps, and ci: export VAR) is dropped once
	return out, m.dropped, nil
}

// makefileCut is learnerMakefile's work: the Makefile's paragraphs and
// which of them stay, decided a step at a time.
type makefileCut struct {
	paras   []makeParagraph
	keep    []bool          // paras[i] stays
	defined map[string]bool // every target the Makefile defines
	dropped []string        // the targets of the rules that go
	kept    strings.Builder // the text kept so far: the variables it uses stay too
}

func newMakefileCut(src []byte) *makefileCut {
	m := &makefileCut{paras: makeParagraphs(string(src)), defined: map[string]bool{}}
	m.keep = make([]bool, len(m.paras))
	for _, p := range m.paras {
		for _, t := range p.targets {
			m.defined[t] = true
		}
	}
	return m
}

// keepLearnerRules keeps every paragraph that defines a learner target and
// drops every other rule.
func (m *makefileCut) keepLearnerRules(targets []string) {
	for i, p := range m.paras {
		if len(p.targets) == 0 {
			continue
		}
		if slices.ContainsFunc(p.targets, func(t string) bool { return slices.Contains(targets, t) }) {
			m.keepParagraph(i)
			continue
		}
		m.dropped = append(m.dropped, p.targets...)
	}
}

// refuseDroppedPrereqs fails when a kept rule needs a dropped one: the
// template's Makefile would not work.
func (m *makefileCut) refuseDroppedPrereqs() error {
	for i, p := range m.paras {
		if !m.keep[i] {
			continue
		}
		for _, pre := range p.prereqs {
			if m.defined[pre] && slices.Contains(m.dropped, pre) {
				return fmt.Errorf("learner Makefile: target %s needs %s, which a template cannot keep (it needs solutions/ or maintainer tools)", strings.Join(p.targets, " "), pre)
			}
		}
	}
	return nil
}

// keepUsedVariables keeps a paragraph defining a variable that kept text
// uses, until nothing more is pulled in. Exports set the environment of
// every recipe, so they always stay.
func (m *makefileCut) keepUsedVariables() {
	for changed := true; changed; {
		changed = false
		text := m.kept.String()
		for i, p := range m.paras {
			if m.keep[i] || len(p.vars) == 0 {
				continue
			}
			if p.export || slices.ContainsFunc(p.vars, func(v string) bool { return usesVar(text, v) }) {
				m.keepParagraph(i)
				changed = true
			}
		}
	}
}

// keepPhonyAndHeadings keeps .PHONY (render lists only the kept targets in
// it), the file's opening comment, and a heading whose next paragraph
// stays.
func (m *makefileCut) keepPhonyAndHeadings() {
	for i, p := range m.paras {
		switch {
		case p.phony:
			m.keep[i] = true
		case p.commentOnly:
			m.keep[i] = i == 0 || (i+1 < len(m.paras) && m.keep[i+1])
		}
	}
}

func (m *makefileCut) keepParagraph(i int) {
	m.keep[i] = true
	m.kept.WriteString(m.paras[i].text)
}

// render writes the kept paragraphs, a blank line apart, and says under
// the opening comment that this is the learner's edition.
func (m *makefileCut) render() []byte {
	var out strings.Builder
	for i, p := range m.paras {
		if !m.keep[i] {
			continue
		}
		if out.Len() > 0 {
			out.WriteString("\n")
		}
		if p.phony {
			out.WriteString(rewritePhony(p.text, m.defined, m.dropped))
		} else {
			out.WriteString(p.text)
		}
		if i == 0 && p.commentOnly {
			out.WriteString("#\n# Learner edition, written by labctl export: the maintainers' targets\n# stay in the course repository, with the reference code they need.\n")
		}
	}
	return []byte(out.String())
}

type makeParagraph struct {
	text        string
	targets     []string // rules it defines
	prereqs     []string
	vars        []string // variables it assigns
	export      bool
	phony       bool
	commentOnly bool
}

var (
	makeAssign = regexp.MustCompile(`^(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*(?::=|::=|\?=|\+=|=)`)
	makeRule   = regexp.MustCompile(`^([^:=#\t][^:=#]*?)\s*:([^=]|$)`)
)

func makeParagraphs(src string) []makeParagraph {
	var paras []makeParagraph
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, parseParagraph(cur))
			cur = nil
		}
	}
	for _, line := range strings.SplitAfter(src, "\n") {
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return paras
}

func parseParagraph(lines []string) makeParagraph {
	p := makeParagraph{text: strings.Join(lines, ""), commentOnly: true}
	continued := false
	for _, raw := range lines {
		line := strings.TrimRight(raw, "\n")
		cont := continued
		continued = strings.HasSuffix(line, `\`)
		if strings.HasPrefix(line, "#") {
			continue
		}
		p.commentOnly = false
		if cont || strings.HasPrefix(line, "\t") {
			continue
		}
		if strings.HasPrefix(line, ".PHONY") {
			p.phony = true
			continue
		}
		if m := makeAssign.FindStringSubmatch(line); m != nil {
			p.vars = append(p.vars, m[1])
			p.export = p.export || strings.HasPrefix(line, "export")
			continue
		}
		if m := makeRule.FindStringSubmatch(line); m != nil {
			p.targets = append(p.targets, strings.Fields(m[1])...)
			rest := line[len(m[1]):]
			rest = strings.TrimPrefix(strings.TrimSpace(rest), ":")
			if i := strings.Index(rest, "##"); i >= 0 {
				rest = rest[:i]
			}
			p.prereqs = append(p.prereqs, strings.Fields(rest)...)
		}
	}
	return p
}

func usesVar(text, name string) bool {
	return strings.Contains(text, "$("+name+")") || strings.Contains(text, "${"+name+"}") || strings.Contains(text, "$$"+name)
}

// rewritePhony lists in .PHONY only the targets the template keeps.
func rewritePhony(text string, defined map[string]bool, dropped []string) string {
	var out []string
	var names []string
	inPhony := false
	for _, raw := range strings.SplitAfter(text, "\n") {
		line := strings.TrimRight(raw, "\n")
		if strings.HasPrefix(line, ".PHONY") || inPhony {
			inPhony = strings.HasSuffix(line, `\`)
			line = strings.TrimSuffix(strings.TrimPrefix(line, ".PHONY:"), `\`)
			names = append(names, strings.Fields(line)...)
			if !inPhony {
				names = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(dropped, n) || !defined[n] && !strings.HasPrefix(n, "$(") })
				out = append(out, ".PHONY: "+strings.Join(names, " ")+"\n")
			}
			continue
		}
		if raw != "" {
			out = append(out, raw)
		}
	}
	return strings.Join(out, "")
}
