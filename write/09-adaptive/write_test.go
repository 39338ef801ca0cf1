package adaptive

// The test-writing track of lab 09. This directory holds the correct
// reference (labctl lays it here; editing those copies changes nothing) and
// the helpers you may use; this file is yours. Write tests that pass on the
// reference and fail on its classic bugs:
//
//	make write-09      runs them on the reference, then on every mutant
//
// What a good suite pins: the "Write the test" section of
// labs/09-adaptive/README.md. Tests run under -race and count only if they
// pass here inside 5 s; a kill counts only as a failed assertion, never a
// panic or a hang (recover a forbidden panic and t.Errorf it; guard a hang
// fake time cannot see with a 1-2 s watchdog). Wait in testing/synctest's
// fake time, never in real time.
