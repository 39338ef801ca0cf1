package catalog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// three hints, each with its three levels.
var threeHints = []Hint{
	{Title: "1. Refill", Nudge: "Where does the bucket refill?", Approach: "Refill it first, then take.", Solution: "```go\nb.refill(now)\n```"},
	{Title: "2. Keys", Nudge: "What may a key hold?", Approach: "Check the key first.", Solution: "```go\ncheck(key)\n```"},
	{Title: "3. Rounding", Nudge: "Which way does it round?", Approach: "Up, never down.", Solution: "```go\nmath.Ceil(x)\n```"},
}

func TestAHintIsRevealedALevelAtATime(t *testing.T) {
	levels := threeHints[0].Levels()
	assert.Equal(t, []Level{{LevelNudge, "Where does the bucket refill?"}, {LevelApproach, "Refill it first, then take."}, {LevelSolution, "```go\nb.refill(now)\n```"}}, levels,
		"each level shows its own hand-written text")
	assert.Equal(t, []string{"nudge", "approach", "near-solution"}, []string{levels[0].Name(), levels[1].Name(), levels[2].Name()})
}

func TestHintStateRevealsLevelByLevelAndRemembers(t *testing.T) {
	root := t.TempDir()
	s, err := LoadHintState(root)
	require.NoError(t, err)
	s.Reveal("07", 2, LevelNudge) // labctl test showed the nudge for the first failure
	s.Current["07"] = 2
	k, ok := s.Next("07", threeHints)
	require.True(t, ok)
	assert.Equal(t, 2, k, "the step the red run pointed at comes first")
	assert.Equal(t, LevelApproach, s.NextLevel("07", 2, threeHints[1]).N, "its next level")
	s.Reveal("07", 2, LevelApproach)
	k, _ = s.Next("07", threeHints)
	assert.Equal(t, 2, k, "until its near-solution is shown")
	s.Reveal("07", 2, LevelSolution)
	k, _ = s.Next("07", threeHints)
	assert.Equal(t, 1, k, "hint 2 is shown whole: the lowest with levels left comes next")
	assert.Equal(t, LevelNudge, s.NextLevel("07", 1, threeHints[0]).N)
	s.Reveal("07", 1, LevelSolution)
	s.Reveal("07", 3, LevelApproach)
	_, ok = s.Next("07", threeHints)
	assert.True(t, ok, "hint 3's near-solution is still to come")
	opened, offered := s.Opened("07", threeHints)
	assert.Equal(t, 2, opened, "hints 1 and 2 had their near-solutions shown; hint 3 only its approach")
	assert.Equal(t, 3, offered, "every hint offers a near-solution")
	s.Reveal("07", 3, LevelSolution)
	_, ok = s.Next("07", threeHints)
	assert.False(t, ok, "every hint shown whole")
	s.Reveal("07", 1, LevelNudge)
	assert.Equal(t, LevelSolution, s.Level("07", 1), "a level once shown stays shown")
	require.NoError(t, s.Save())

	again, err := LoadHintState(root)
	require.NoError(t, err)
	assert.Equal(t, LevelSolution, again.Level("07", 1), "the state survives a save")
	again.Reset("07")
	k, _ = again.Next("07", threeHints)
	assert.Equal(t, 1, k)
}

func TestAnOldHintStateReadsAsShownWhole(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, ".labctl"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, hintStateFile), []byte(`{"shown":{"07":[1,3]},"seen":{"02":1}}`), 0o644))
	s, err := LoadHintState(root)
	require.NoError(t, err)
	assert.Equal(t, LevelSolution, s.Level("07", 1))
	assert.Equal(t, 0, s.Level("07", 2))
	assert.Equal(t, LevelSolution, s.Level("02", 1))
}

func TestHintStateReadsTheOlderCountFormat(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, ".labctl"), 0o755))
	write(t, root, ".labctl/hints.json", `{"seen": {"03": 2}}`)
	s, err := LoadHintState(root)
	require.NoError(t, err)
	k, _ := s.Next("03", append(threeHints, threeHints[0]))
	assert.Equal(t, 3, k, `"seen": 2 meant hints 1 and 2, shown whole`)
}
