package grade

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The grade workflow runs a learner's code. These are the promises that keep
// the held-back tests' token out of that code's reach; an edit that breaks
// one fails here, not in a learner's repository.
func TestGradeWorkflowKeepsTheHeldBackTokenAwayFromLearnerCode(t *testing.T) {
	t.Parallel()
	root, err := catalog.FindRoot(".")
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, ".github/workflows/grade.yml"))
	require.NoError(t, err)
	var wf struct {
		On          map[string]any    `yaml:"on"`
		Permissions map[string]string `yaml:"permissions"`
		Env         map[string]string `yaml:"env"`
		Jobs        map[string]struct {
			Env   map[string]string `yaml:"env"`
			Steps []struct {
				Name string            `yaml:"name"`
				ID   string            `yaml:"id"`
				If   string            `yaml:"if"`
				Uses string            `yaml:"uses"`
				With map[string]any    `yaml:"with"`
				Env  map[string]string `yaml:"env"`
				Run  string            `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &wf))

	assert.NotContains(t, wf.On, "pull_request_target", "pull_request_target runs a fork's code with the base repository's secrets")
	assert.Equal(t, map[string]string{"contents": "read"}, wf.Permissions, "the job's GITHUB_TOKEN reads, nothing more")
	for k, v := range wf.Env {
		assert.NotContains(t, v, "secrets.", "workflow env %s would hand a secret to every step", k)
	}
	pinned := regexp.MustCompile(`^[\w.-]+/[\w.-]+@[0-9a-f]{40}$`)
	secretSteps := 0
	for name, job := range wf.Jobs {
		for k, v := range job.Env {
			assert.NotContains(t, v, "secrets.", "job %s env %s would hand a secret to every step", name, k)
		}
		for _, s := range job.Steps {
			label := s.Name + s.Uses
			if s.Uses != "" {
				assert.Regexp(t, pinned, s.Uses, "step %q: pin actions to a commit SHA, not a tag someone can move", label)
			}
			if strings.HasPrefix(s.Uses, "actions/checkout@") {
				assert.Equal(t, false, s.With["persist-credentials"], "step %q: a checkout must not leave its token in .git/config for the learner's tests to read", label)
			}
			var text strings.Builder
			for _, v := range s.With {
				if str, ok := v.(string); ok {
					text.WriteString(str)
				}
			}
			for _, v := range s.Env {
				text.WriteString(v)
			}
			text.WriteString(s.Run)
			if !strings.Contains(text.String(), "secrets.") {
				continue
			}
			secretSteps++
			assert.True(t, strings.HasPrefix(s.Uses, "actions/checkout@"), "step %q: only the held-back checkout may see a secret", label)
			assert.Empty(t, s.Run, "step %q: a secret never reaches a shell", label)
			assert.Contains(t, s.If, "github.event.pull_request.head.repo.full_name == github.repository", "step %q: a fork's pull request has no secrets, so the step must not run there", label)
		}
	}
	assert.Equal(t, 1, secretSteps, "exactly one step, the held-back checkout, uses a secret")
}
