package bridge

// The test-writing track of lab 06. This directory holds the correct
// reference (labctl lays it here; editing those copies changes nothing) and
// the helpers you may use; this file is yours. Write tests that pass on the
// reference and fail on its classic bugs:
//
//	make write-06      runs them on the reference, then on every mutant
//
// What a good suite pins: the "Write the test" section of
// labs/06-bridge/README.md. Tests run under -race; wait in
// testing/synctest's fake time, never in real time.
