//go:build race

package otlplog_test

// raceSlowdown scales the time limits of the tests: the race detector
// makes the handler several times slower.
const raceSlowdown = 5
