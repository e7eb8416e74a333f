package decisionlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// PolicyEvent is a proxy's report that it read its policy file.
type PolicyEvent struct {
	Time    time.Time `json:"time"`
	Loaded  bool      `json:"-"` // false: rejected, and the proxy denies everything
	Mode    string    `json:"mode"`
	Entries int       `json:"entries"`
	Err     string    `json:"err"`
}

// parsePolicyEvent reads a policy watcher line; ok is false for others.
func parsePolicyEvent(b []byte) (PolicyEvent, bool) {
	var l struct {
		Msg string `json:"msg"`
		PolicyEvent
	}
	if json.Unmarshal(b, &l) != nil {
		return PolicyEvent{}, false
	}
	switch l.Msg {
	case MsgPolicyLoaded:
		l.Loaded = true
	case MsgPolicyRejected:
	default:
		return PolicyEvent{}, false
	}
	return l.PolicyEvent, true
}

// errFound stops followLines once the event is there.
var errFound = errors.New("found")

// policyPoll is how often WaitPolicy looks at the log.
const policyPoll = 20 * time.Millisecond

// WaitPolicy waits until the log at path has, after offset, a line saying
// the proxy loaded (or rejected) its policy file, and returns the first
// such event. A caller that wrote a new policy file takes the log's size
// before writing, then waits here to know the proxy has the change in
// force (the proxy closes the connections that lost permission before it
// logs the load). It fails when ctx is done first.
func WaitPolicy(ctx context.Context, path string, offset int64) (PolicyEvent, error) {
	var ev PolicyEvent
	err := followLines(ctx, path, offset, policyPoll, func(b []byte) error {
		if e, ok := parsePolicyEvent(b); ok {
			ev = e
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return ev, nil
	}
	if err != nil {
		return PolicyEvent{}, err
	}
	return PolicyEvent{}, fmt.Errorf("no policy load in %s: %w", path, ctx.Err())
}
