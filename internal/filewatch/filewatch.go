// Package filewatch follows files that their writers replace by rename
// (doorman's policy files, a proxy's config file), calling back when one
// may have changed.
//
// The directories are watched with inotify, not the files' inodes,
// because a rename replaces the inode; one inotify instance serves every
// file of a Follower, since a host runs a proxy per sandbox and the
// instances a user may hold are few (fs.inotify.max_user_instances, 128
// by default). inotify carries every change and reports a lost event
// (queue overflow), so the files are also read on a slow tick only as a
// safety net (Check); without a watch (a filesystem without inotify, a
// directory itself replaced, the watch broken) polling is all there is,
// on a fast tick (Poll). An idle follower then wakes every few seconds.
package filewatch

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Default intervals: Poll keeps a one-second promise without a watch;
// Check is the safety net with one.
const (
	DefaultPoll  = 500 * time.Millisecond
	DefaultCheck = 5 * time.Second
)

// File is one file followed.
type File struct {
	// Path is the file.
	Path string
	// Changed is called (on Run's goroutine) after an event that names
	// the file or its directory, after a lost event, once when the watch
	// is in place, and on every tick: it reads the file and compares it
	// with what it last read.
	Changed func()
}

// Follower follows Files with one inotify instance.
type Follower struct {
	Files []File
	// Unwatched is told why a file's directory cannot be watched
	// (polling then); nil ignores it.
	Unwatched func(path string, err error)
	// Lost is told of an error the watch reported (a lost event, a
	// broken watch; polling from then on); nil ignores it.
	Lost func(err error)
	// Poll and Check are the intervals without and with a watch; zero
	// means DefaultPoll and DefaultCheck.
	Poll, Check time.Duration

	// newWatcher makes the inotify instance; nil means
	// fsnotify.NewWatcher. Tests stand in a failing one.
	newWatcher func() (*fsnotify.Watcher, error)
}

// Run follows the files until ctx is done. Without an inotify instance
// (the user's fs.inotify.max_user_instances reached: a host with
// hundreds of sandboxes) or a watch, it tells Unwatched and polls.
func (f Follower) Run(ctx context.Context) {
	poll, check := f.Poll, f.Check
	if poll <= 0 {
		poll = DefaultPoll
	}
	if check <= 0 {
		check = DefaultCheck
	}
	newWatcher := f.newWatcher
	if newWatcher == nil {
		newWatcher = fsnotify.NewWatcher
	}
	interval := check
	// Nil channels, and so no events, without an instance.
	var events chan fsnotify.Event
	var errs chan error
	if fw, err := newWatcher(); err != nil {
		f.unwatched(fmt.Errorf("no inotify instance: %w", err))
		interval = poll
	} else {
		defer fw.Close()
		events, errs = fw.Events, fw.Errors
		for _, file := range f.Files {
			if err := fw.Add(filepath.Dir(file.Path)); err != nil {
				if f.Unwatched != nil {
					f.Unwatched(file.Path, err)
				}
				interval = poll
			}
		}
	}
	// A change between the caller's first read and the watch above
	// raised no event: read the files once more now.
	f.changed(func(File) bool { return true })
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				// The watcher gave up: poll from here on.
				events = nil
				tick.Reset(poll)
				continue
			}
			name := filepath.Clean(ev.Name)
			dirGone := ev.Has(fsnotify.Remove | fsnotify.Rename)
			f.changed(func(file File) bool {
				if name == filepath.Clean(file.Path) {
					return true
				}
				if dirGone && name == filepath.Dir(filepath.Clean(file.Path)) {
					// The directory itself went: its watch with it.
					tick.Reset(poll)
					return true
				}
				return false
			})
		case err, ok := <-errs:
			if !ok {
				errs = nil
				tick.Reset(poll)
				continue
			}
			// A lost event (queue overflow) or a broken watch: the
			// files are read now and, from here on, polled.
			if f.Lost != nil {
				f.Lost(err)
			}
			tick.Reset(poll)
			f.changed(func(File) bool { return true })
		case <-tick.C:
			f.changed(func(File) bool { return true })
		}
	}
}

// changed calls Changed of every file which says.
func (f Follower) changed(which func(File) bool) {
	for _, file := range f.Files {
		if which(file) {
			file.Changed()
		}
	}
}

// unwatched tells Unwatched that err keeps every file unwatched.
func (f Follower) unwatched(err error) {
	if f.Unwatched == nil {
		return
	}
	for _, file := range f.Files {
		f.Unwatched(file.Path, err)
	}
}
