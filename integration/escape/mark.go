package main

import (
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// markControl sets SO_MARK on a socket before it connects or sends. On
// Linux >= 5.17 CAP_NET_RAW is enough; before, it takes CAP_NET_ADMIN.
func markControl(mark uint32) func(string, string, syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
		}); cerr != nil {
			return cerr
		}
		if err != nil {
			return fmt.Errorf("setsockopt SO_MARK %#x: %w", mark, err)
		}
		return nil
	}
}

// trySOMark sends TCP and UDP to the denied host once per mark, all marks
// at once (a mark that is silently dropped would otherwise cost a timeout
// each).
func trySOMark(cfg *config) row {
	var t tally
	if len(cfg.marks) == 0 {
		t.note("skipped: no -marks")
		return t.row("so-mark")
	}
	tcpDst := netip.AddrPortFrom(cfg.denied4, cfg.markPort)
	udpDst := netip.AddrPortFrom(cfg.denied4, cfg.udpPort)
	results := make([]tally, len(cfg.marks))
	var wg sync.WaitGroup
	for i, mark := range cfg.marks {
		wg.Go(func() {
			r := &results[i]
			if c, err := dial(cfg, tcpDst, markControl(mark)); err != nil {
				r.fail("TCP connect "+tcpDst.String(), err)
			} else {
				sendAndWatch(r, "TCP "+tcpDst.String(), c, payload(fmt.Sprintf("so-mark-%#x", mark)), cfg.timeout)
				c.Close()
			}
			udpExchange(r, cfg, udpDst, payload(fmt.Sprintf("so-mark-%#x", mark)), markControl(mark))
		})
	}
	wg.Wait()
	// The same outcome for many marks: count it once.
	var errs, notes counted
	for _, r := range results {
		t.sent += r.sent
		errs.add(r.errs...)
		notes.add(r.detail...)
	}
	t.note("%d marks tried", len(cfg.marks))
	t.errs = errs.lines()
	t.detail = append(t.detail, notes.lines()...)
	return t.row("so-mark")
}
