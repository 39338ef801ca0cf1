package adaptive

// OutcomeOf classifies a request's error for Token.Done.
//
// TODO(lab 09): nil is Success; the caller's cancellation (context.Canceled,
// wrapped or not) is Ignored; anything else, an attempt's deadline
// (context.DeadlineExceeded) included, is Dropped.
func OutcomeOf(err error) Outcome {
	return Success
}
