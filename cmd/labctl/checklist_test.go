package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/checklist"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const twoItems = "- **A-1** First promise\n  Why: w\n  Proof: `solutions/x` `TestA`, `TestB`\n" +
	"- **B-1** Second `promise`\n  Why: w\n  Proof: `solutions/y` `TestC`\n"

func TestChecklistCommandPrintsOneLinePerItemAndFailsOnAnyCross(t *testing.T) {
	c, err := checklist.Parse([]byte(twoItems))
	require.NoError(t, err)
	results := map[string]*gotest.PackageResult{
		"solutions/x": {Status: gotest.Pass, Tests: map[string]*gotest.TestResult{
			"TestA": {Name: "TestA", Status: gotest.Pass}, "TestB": {Name: "TestB", Status: gotest.Pass}}},
		"solutions/y": {Status: gotest.Pass, Tests: map[string]*gotest.TestResult{
			"TestC": {Name: "TestC", Status: gotest.Skip, Output: "    y_test.go:3: needs a GPU\n"}}},
	}
	fake := func(_ context.Context, r checklist.PackageRun) (*gotest.PackageResult, error) {
		return results[r.Package], nil
	}
	var out, errOut bytes.Buffer
	e := &env{root: t.TempDir(), stdout: &out, stderr: &errOut}

	err = runChecklist(t.Context(), e, c, fake)
	require.ErrorIs(t, err, errRed, "a skipped test makes the run red")
	assert.Contains(t, out.String(), "✓ A-1 First promise (2 tests)\n")
	assert.Contains(t, out.String(), "✗ B-1 Second promise (TestC skipped: needs a GPU)\n", "code spans print as plain text")
	assert.Contains(t, out.String(), "checklist: 1/2 items kept")
	assert.Contains(t, errOut.String(), "[ 1/2] compiling and testing solutions/x (2 tests)", "progress goes to stderr")

	results["solutions/y"].Tests["TestC"].Status = gotest.Pass
	out.Reset()
	require.NoError(t, runChecklist(t.Context(), e, c, fake))
	assert.Contains(t, out.String(), "checklist: 2/2 items kept")
}

func TestChecklistOnlySelectsByIDOrPrefix(t *testing.T) {
	c, err := checklist.Parse([]byte(twoItems))
	require.NoError(t, err)
	sel, err := selectItems(c, "b")
	require.NoError(t, err)
	require.Len(t, sel.Items, 1)
	assert.Equal(t, "B-1", sel.Items[0].ID)
	_, err = selectItems(c, "ZZZ")
	assert.ErrorIs(t, err, errUsage)
}

func TestChecklistHelp(t *testing.T) {
	code, stdout, _ := labctl(t, fixture(t), "checklist", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "one ✓/✗ line per item")
	assert.Contains(t, stdout, "-only")
}
