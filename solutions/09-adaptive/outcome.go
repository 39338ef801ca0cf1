package adaptive

import (
	"context"
	"errors"
)

// OutcomeOf classifies a request's error for Token.Done: nil is Success; the
// caller's cancellation (context.Canceled, wrapped or not) is Ignored — a
// caller that left says nothing about the provider's load; anything else,
// an attempt's deadline included, is Dropped.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case errors.Is(err, context.Canceled):
		return Ignored
	default:
		return Dropped
	}
}
