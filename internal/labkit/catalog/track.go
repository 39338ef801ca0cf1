package catalog

// Track is one half of the course, and the learner template that holds it.
//
// There are two templates because each track's answers are the other's
// material. The labs track asks for the code and ships the exercise tests;
// its answers are the references and their mutants. The test-writing track
// asks for the tests and ships the references and mutants; its answers are
// the exercise tests. One template holding both would hand every learner
// the answers to whichever track they are graded on — which is what the
// single template did until both were split (issue 33).
type Track string

const (
	// TrackLabs is the implementation track: stubs to finish, graded by
	// the exercise tests.
	TrackLabs Track = "labs"
	// TrackWrite is the test-writing track: references to test, graded by
	// the mutants the learner's tests kill.
	TrackWrite Track = "write"
)

// Tracks lists the tracks, in the order docs name them.
var Tracks = []Track{TrackLabs, TrackWrite}
