package gcs

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/api/googleapi"
	gstorage "google.golang.org/api/storage/v1"
)

// The resumable-upload protocol, spoken directly: the generated client
// uploads a whole object in one call, but an export must send every byte
// and finalise later (https://cloud.google.com/storage/docs/performing-resumable-uploads).
// A session is started only when the object outgrows one chunk; a smaller
// object is held whole and stored by one request at Commit.

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Retries of one chunk after a transient failure (a lost connection, 408,
// 429, 5xx); the session remembers what it received, so a retry resends
// only the rest.
const (
	chunkAttempts = 5
	firstBackoff  = 500 * time.Millisecond
)

// abortTimeout bounds the cancellation of a session, which runs on a fresh
// context so that a cancelled task still cleans up after itself.
const abortTimeout = 30 * time.Second

const contentType = "application/octet-stream"

// upload is one object's resumable upload; it is the storage.Pending its
// Upload returns.
type upload struct {
	b       *bucket
	key     string
	buf     []byte // the chunk being filled, and in the end the held last one
	n       int    // bytes in buf
	session string // the session URI; "" until the first chunk is sent
	sent    int64  // bytes the session holds
	crc     uint32 // CRC32C of the bytes before buf
	done    bool   // committed or aborted
}

func newUpload(b *bucket, key string, chunk int) *upload {
	return &upload{b: b, key: key, buf: make([]byte, chunk)}
}

// stream reads r to its end, sending each full chunk once another byte
// shows it is not the last.
func (u *upload) stream(ctx context.Context, r io.Reader) error {
	for {
		m, err := io.ReadFull(r, u.buf[u.n:])
		u.n += m
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var next [1]byte
		k, err := readSome(r, next[:])
		if k == 0 {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if serr := u.sendChunk(ctx); serr != nil {
			return serr
		}
		u.buf[0], u.n = next[0], 1
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readSome reads until it gets a byte or an error.
func readSome(r io.Reader, p []byte) (int, error) {
	for {
		n, err := r.Read(p)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// sendChunk sends the full buffer as a chunk that is not the last.
func (u *upload) sendChunk(ctx context.Context) error {
	if u.session == "" {
		if err := u.start(ctx); err != nil {
			return err
		}
	}
	start := u.sent
	end := start + int64(u.n) // exclusive
	err := u.retry(ctx, func() (bool, error) {
		off := int(u.sent - start)
		resp, err := u.put(ctx, u.buf[off:u.n], fmt.Sprintf("bytes %d-%d/*", u.sent, end-1), nil)
		if err != nil {
			return true, err
		}
		defer drain(resp)
		if resp.StatusCode != http.StatusPermanentRedirect {
			return retryable(resp.StatusCode), sessionError(resp)
		}
		got, err := persisted(resp)
		if err != nil {
			return false, err
		}
		if got < u.sent || got > end {
			return false, fmt.Errorf("the resumable upload of %q holds %d bytes after a chunk ending at %d; upload again", u.key, got, end)
		}
		u.sent = got
		if got < end {
			return true, errPartial // the server kept part of the chunk: send the rest
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	u.crc = crc32.Update(u.crc, crcTable, u.buf[:u.n])
	u.n = 0
	return nil
}

var errPartial = errors.New("the server kept part of the chunk")

// start opens the session.
func (u *upload) start(ctx context.Context) error {
	meta, _ := json.Marshal(map[string]string{"name": u.key, "contentType": contentType})
	q := url.Values{"uploadType": {"resumable"}, "name": {u.key}}
	return u.retry(ctx, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.b.uploadURL+"?"+q.Encode(), bytes.NewReader(meta))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json; charset=UTF-8")
		req.Header.Set("X-Upload-Content-Type", contentType)
		resp, err := u.b.hc.Do(req)
		if err != nil {
			return true, err
		}
		defer drain(resp)
		if err := googleapi.CheckResponse(resp); err != nil {
			return retryable(resp.StatusCode), err
		}
		u.session = resp.Header.Get("Location")
		if u.session == "" {
			return false, fmt.Errorf("the server started a resumable upload of %q without naming its session (no Location header)", u.key)
		}
		return false, nil
	})
}

// Commit finalises the object with the held chunk (or stores a small
// object whole), checking what the server stored against what was read.
func (u *upload) Commit(ctx context.Context) error {
	if u.done {
		return errors.New("the upload was already committed or aborted")
	}
	crc := crc32.Update(u.crc, crcTable, u.buf[:u.n])
	want := base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc))
	total := u.sent + int64(u.n)
	var obj *gstorage.Object
	var err error
	if u.session == "" {
		obj, err = u.insert(ctx, want)
	} else {
		obj, err = u.finish(ctx, total, want)
	}
	if err != nil {
		return explain(err)
	}
	u.done, u.buf = true, nil
	if obj.Size != uint64(total) || (obj.Crc32c != "" && obj.Crc32c != want) {
		return fmt.Errorf("the server stored %q as %d bytes (CRC32C %s), but %d bytes (CRC32C %s) were sent; the object is corrupt: export again", u.key, obj.Size, obj.Crc32c, total, want)
	}
	return nil
}

// insert stores a small object whole, in one request of the generated
// client, retried as a chunk would be: the request carries the whole
// object, so sending it again stores the same bytes.
func (u *upload) insert(ctx context.Context, crc string) (*gstorage.Object, error) {
	var obj *gstorage.Object
	err := u.retry(ctx, func() (bool, error) {
		var err error
		obj, err = u.b.svc.Objects.Insert(u.b.name, &gstorage.Object{Name: u.key, ContentType: contentType, Crc32c: crc}).
			Media(bytes.NewReader(u.buf[:u.n]), googleapi.ChunkSize(0), googleapi.ContentType(contentType)).Context(ctx).Do()
		var ge *googleapi.Error
		if errors.As(err, &ge) {
			return retryable(ge.Code), err
		}
		return err != nil, err
	})
	return obj, err
}

// finish sends the held chunk as the last one, which makes the object.
func (u *upload) finish(ctx context.Context, total int64, crc string) (*gstorage.Object, error) {
	start := u.sent
	var obj *gstorage.Object
	err := u.retry(ctx, func() (bool, error) {
		off := int(u.sent - start)
		rng := fmt.Sprintf("bytes %d-%d/%d", u.sent, total-1, total)
		if u.sent == total {
			rng = fmt.Sprintf("bytes */%d", total)
		}
		resp, err := u.put(ctx, u.buf[off:u.n], rng, http.Header{"X-Goog-Hash": {"crc32c=" + crc}})
		if err != nil {
			return true, err
		}
		defer drain(resp)
		switch resp.StatusCode {
		case http.StatusOK, http.StatusCreated:
			obj = new(gstorage.Object)
			if err := json.NewDecoder(resp.Body).Decode(obj); err != nil {
				return false, fmt.Errorf("reading the stored object's description: %w", err)
			}
			return false, nil
		case http.StatusPermanentRedirect:
			got, err := persisted(resp)
			if err == nil && got > u.sent && got < total {
				u.sent = got
				return true, errPartial
			}
			return false, fmt.Errorf("the server did not finalise %q after its last chunk (it holds %d of %d bytes); export again", u.key, got, total)
		}
		return retryable(resp.StatusCode), sessionError(resp)
	})
	return obj, err
}

// Abort cancels the session, so that the server drops what it received. A
// session that cannot be cancelled still never becomes an object, and the
// server discards it after a week.
func (u *upload) Abort(ctx context.Context) error {
	if u.done {
		return nil
	}
	u.done, u.buf = true, nil
	if u.session == "" {
		return nil
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodDelete, u.session, nil)
	if err != nil {
		return nil
	}
	if resp, err := u.b.hc.Do(req); err == nil {
		drain(resp)
	}
	return nil
}

// put sends one PUT to the session.
func (u *upload) put(ctx context.Context, data []byte, contentRange string, h http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.session, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Range", contentRange)
	req.Header.Set("Content-Type", contentType)
	return u.b.hc.Do(req)
}

// retry runs try until it succeeds, fails for good, or has run
// chunkAttempts times after transient failures. Before trying again after
// a failure it asks the session how much it holds, so only the rest is
// resent.
func (u *upload) retry(ctx context.Context, try func() (again bool, err error)) error {
	wait := firstBackoff
	var err error
	for attempt := 1; ; attempt++ {
		var again bool
		again, err = try()
		if err == nil || !again || ctx.Err() != nil {
			break
		}
		if errors.Is(err, errPartial) {
			attempt-- // progress, not a failure
			continue
		}
		if attempt == chunkAttempts {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait *= 2
		if u.session != "" {
			if got, qerr := u.query(ctx); qerr == nil && got >= u.sent {
				u.sent = got
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// query asks the session how many bytes it holds.
func (u *upload) query(ctx context.Context) (int64, error) {
	resp, err := u.put(ctx, nil, "bytes */*", nil)
	if err != nil {
		return 0, err
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusPermanentRedirect {
		return 0, sessionError(resp)
	}
	return persisted(resp)
}

// persisted reads a 308's Range header ("bytes=0-N"): how many bytes the
// session holds.
func persisted(resp *http.Response) (int64, error) {
	rng := resp.Header.Get("Range")
	if rng == "" {
		return 0, nil
	}
	_, last, ok := strings.Cut(strings.TrimPrefix(rng, "bytes="), "-")
	n, err := strconv.ParseInt(last, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(rng, "bytes=0-") {
		return 0, fmt.Errorf("the server answered a resumable upload with Range %q, which is not bytes=0-N", rng)
	}
	return n + 1, nil
}

// sessionError describes a failed request to a session.
func sessionError(resp *http.Response) error {
	err := googleapi.CheckResponse(resp)
	if err == nil {
		err = &googleapi.Error{Code: resp.StatusCode, Message: "unexpected status " + resp.Status}
	}
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusGone:
		return fmt.Errorf("%w; the resumable upload session expired or was cancelled: export again", err)
	}
	return err
}

func retryable(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// verifiedBody checks a download against the CRC32C the server announced
// (X-Goog-Hash), so a truncated or corrupted stream fails at its end
// instead of passing as the object. Bodies the transport decompressed are
// not checked: the hash is of the stored, compressed bytes.
type verifiedBody struct {
	r    io.ReadCloser
	want string // base64 CRC32C; "" when there is nothing to check
	crc  uint32
}

func newVerifiedBody(resp *http.Response) io.ReadCloser {
	v := &verifiedBody{r: resp.Body}
	if resp.Uncompressed || resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("X-Goog-Stored-Content-Encoding") == "gzip" {
		return v
	}
	for _, h := range resp.Header.Values("X-Goog-Hash") {
		for _, part := range strings.Split(h, ",") {
			if c, ok := strings.CutPrefix(strings.TrimSpace(part), "crc32c="); ok {
				v.want = c
			}
		}
	}
	return v
}

func (v *verifiedBody) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.crc = crc32.Update(v.crc, crcTable, p[:n])
	if errors.Is(err, io.EOF) && v.want != "" {
		if got := base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, v.crc)); got != v.want {
			return n, fmt.Errorf("the object read back has CRC32C %s, but the server announced %s: the download was corrupted; read it again", got, v.want)
		}
	}
	return n, err
}

func (v *verifiedBody) Close() error { return v.r.Close() }
