package identity

import "math"

// MinSecretBits is the least SecretBits a secret from the environment must
// score: half the 256 bits RFC 7518 §3.2 asks of an HS256 key, since the
// estimate below is an upper bound that random text scores well under.
const MinSecretBits = 128

// SecretBits estimates, from the secret alone, how many bits of entropy s
// can carry at most. The rule: the length of s's shortest repeating unit
// times the Shannon entropy of s's byte frequencies — what that many bytes
// drawn in those proportions could carry — and the lower of that and the
// same product over the differences between neighbouring bytes, so a run
// (abcdef…, 0123…) counts for no more than a repeat (aaaa…, abab…).
//
// It is a ceiling, not a measure, and it is meant to catch what a person
// types when asked for a secret: 32 × "a" scores 0, "0123456789abcdef"
// twice 9, "passwordpassword…" 22. Random secrets clear it with room to
// spare: `openssl rand -hex 32` (64 hex digits) scores about 240, 32 raw
// random bytes about 155 (never under 139 in 20,000 draws), `openssl rand
// -base64 32` about 210. Two honest misses: 32 hex digits (`openssl rand
// -hex 16`, 128 random bits) score about 112 — a short sample of 16 symbols
// looks less varied than it is — and fail, which asks for the 256-bit key
// the RFC wants anyway; and a memorable phrase scores like random text, since
// no estimator can tell them apart — which is why secure_app also refuses
// the repository's published dev secrets by name.
func SecretBits(s []byte) float64 {
	if len(s) == 0 {
		return 0
	}
	deltas := make([]byte, 0, len(s)-1)
	for i := 1; i < len(s); i++ {
		deltas = append(deltas, s[i]-s[i-1]) // mod 256
	}
	perByte := shannon(s)
	if len(deltas) > 0 {
		perByte = min(perByte, shannon(deltas))
	}
	return float64(period(s)) * perByte
}

// shannon is the entropy in bits per byte of b's byte frequencies.
func shannon(b []byte) float64 {
	var counts [256]int
	for _, c := range b {
		counts[c]++
	}
	h := 0.0
	for _, n := range counts {
		if n > 0 {
			p := float64(n) / float64(len(b))
			h -= p * math.Log2(p)
		}
	}
	return h
}

// period is the length of s's shortest repeating unit: p such that
// s[i] == s[i-p] for every i ≥ p, or len(s) when there is none shorter than
// half of it.
func period(s []byte) int {
	for p := 1; p <= len(s)/2; p++ {
		repeats := true
		for i := p; i < len(s); i++ {
			if s[i] != s[i-p] {
				repeats = false
				break
			}
		}
		if repeats {
			return p
		}
	}
	return len(s)
}
