package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// maxSecret bounds a secret file: a credential, not a document.
const maxSecret = 16 << 10

// ReadSecret reads the credential an injection puts into requests: the
// file's content, one trailing newline ("\n" or "\r\n") dropped. It must
// be a valid header value: not empty, no control characters but tabs. An
// error names the file and why, never its content.
func ReadSecret(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secret file: %w", err)
	}
	defer f.Close()
	buf := make([]byte, maxSecret+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("secret file %s: %w", path, err)
	}
	if n > maxSecret {
		return nil, fmt.Errorf("secret file %s: longer than %d bytes", path, maxSecret)
	}
	s := bytes.TrimSuffix(bytes.TrimSuffix(buf[:n], []byte("\n")), []byte("\r"))
	if len(s) == 0 {
		return nil, fmt.Errorf("secret file %s: empty", path)
	}
	for _, c := range s {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return nil, fmt.Errorf("secret file %s: holds a control character, so it cannot be a header value", path)
		}
	}
	return s, nil
}

// CheckSecrets reads every secret file p's injections name and reports
// the first that cannot be used: what refuses a policy before it is put
// in force.
func (p *Policy) CheckSecrets() error {
	var errs []error
	for _, path := range p.SecretFiles() {
		if _, err := ReadSecret(path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
