// Package labkit holds the library behind cmd/labctl, in packages named for
// what they do. From the bottom up (a package imports only those above it
// in this list):
//
//   - labfs: the plumbing, with no notion of a lab: git and go commands,
//     hashes, the JSON files caches keep;
//   - catalog: the labs, their tracks, tests, pristine tests and hints;
//   - gotest: running go test (or a built test binary) and reading what
//     it reports;
//   - checklist: the production-readiness checklist and its proofs;
//   - mutation: a lab's mutant patches, and the schema that builds many of
//     them at once;
//   - write: the test-writing track, scored by the mutants it kills;
//   - verify: the lab conventions (labctl verify);
//   - grade: grading, its reports, and GitHub Classroom's autograding;
//   - export: the learner templates, free of their track's answers.
//
// The packages' tests share a fixture repository (testdata/fixture) and
// the helpers in testdata/labtest. This package itself holds no code.
package labkit
