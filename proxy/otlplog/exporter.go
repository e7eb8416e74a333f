package otlplog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	sdklog "go.opentelemetry.io/otel/sdk/log"
)

// Retries of one export: after a network error or a 429/502/503/504, the
// export is sent again, waiting retryFirst, then twice as long each time
// up to retryMax (or what Retry-After says), until the export's context
// (Config.ExportTimeout) runs out.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
	// maxResponse bounds how much of a response is read.
	maxResponse = 64 << 10
)

// httpExporter is an sdklog.Exporter that posts each batch to an OTLP/HTTP
// logs endpoint as one protobuf ExportLogsServiceRequest, as the SDK's
// otlploghttp exporter does (see encode.go for why it is not used).
type httpExporter struct {
	url     string
	headers map[string]string
	client  *http.Client
}

var _ sdklog.Exporter = (*httpExporter)(nil)

// newHTTPExporter returns an exporter that posts to u with headers; no
// request, connection attempt included, outlasts timeout.
func newHTTPExporter(u *url.URL, headers map[string]string, timeout time.Duration) *httpExporter {
	transport := &http.Transport{
		// As OpenTelemetry's exporters do: HTTPS_PROXY and NO_PROXY apply.
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: timeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        1,
		IdleConnTimeout:     90 * time.Second,
	}
	return &httpExporter{
		url:     u.String(),
		headers: headers,
		client:  &http.Client{Transport: transport, Timeout: timeout},
	}
}

// rejectedError is a 2xx answer whose partial_success says the collector
// refused some of the records.
type rejectedError struct {
	rejected int64
	message  string
}

func (e *rejectedError) Error() string {
	return fmt.Sprintf("collector rejected %d records: %s", e.rejected, e.message)
}

// Export posts records, retrying as said above within ctx.
func (e *httpExporter) Export(ctx context.Context, records []sdklog.Record) error {
	if len(records) == 0 {
		return nil
	}
	body := appendRequest(nil, records)
	backoff := retryFirst
	for {
		wait, err := e.post(ctx, body)
		if err == nil || wait < 0 {
			return err
		}
		if wait == 0 {
			wait, backoff = backoff, min(2*backoff, retryMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (giving up: %v)", err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// post sends one request. On failure, wait says whether to retry: < 0 no,
// 0 after the usual backoff, > 0 after that long (Retry-After).
func (e *httpExporter) post(ctx context.Context, body []byte) (wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return -1, err
	}
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", "doorman")
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return -1, err
		}
		return 0, err // connection refused, reset, DNS: the collector may come back
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse)) // so the connection can be reused
	resp.Body.Close()

	switch sc := resp.StatusCode; {
	case sc >= 200 && sc <= 299:
		if isProtobuf(resp.Header.Get("Content-Type")) {
			if ps := parseResponse(data); ps.rejected > 0 {
				return -1, &rejectedError{rejected: ps.rejected, message: ps.message}
			}
		}
		return 0, nil
	case sc == http.StatusTooManyRequests, sc == http.StatusBadGateway,
		sc == http.StatusServiceUnavailable, sc == http.StatusGatewayTimeout:
		return retryAfter(resp.Header.Get("Retry-After")), statusError(resp, data)
	default:
		return -1, statusError(resp, data)
	}
}

// Shutdown closes the idle connection to the collector.
func (e *httpExporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

// ForceFlush does nothing: Export holds nothing back.
func (e *httpExporter) ForceFlush(context.Context) error { return nil }

// statusError describes a non-2xx answer, with its body when it is text.
func statusError(resp *http.Response, data []byte) error {
	msg := fmt.Sprintf("collector answered %s", resp.Status)
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if strings.HasPrefix(ct, "text/") || ct == "application/json" {
		if s := strings.TrimSpace(strings.ToValidUTF8(string(data[:min(len(data), 200)]), "?")); s != "" {
			msg += ": " + s
		}
	}
	return errors.New(msg)
}

func isProtobuf(contentType string) bool {
	ct, _, _ := mime.ParseMediaType(contentType)
	return ct == "application/x-protobuf"
}

// retryAfter reads a Retry-After header (seconds or an HTTP date); 0 if
// absent or unreadable.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return min(time.Duration(s)*time.Second, time.Minute)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return min(d, time.Minute)
		}
	}
	return 0
}
