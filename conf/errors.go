package conf

import "fmt"

// EntryError is the error ParseEntry returns: the entry as written and why
// it is not one. Its text is `"<entry>": <reason>`.
type EntryError struct {
	Entry  string // the entry as given to ParseEntry, trimmed
	Reason string // why it is invalid, e.g. "port range reversed: 9-3"
}

func (e *EntryError) Error() string { return fmt.Sprintf("%q: %s", e.Entry, e.Reason) }

// entryErrorf builds an *EntryError for entry.
func entryErrorf(entry, format string, args ...any) *EntryError {
	return &EntryError{Entry: entry, Reason: fmt.Sprintf(format, args...)}
}
