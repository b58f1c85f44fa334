package driver

import "io"

// LimitReader reads r and fails with a *TooLargeError once more than max
// bytes arrive (max < 0: no limit): a file may grow while it is read, and an
// endless one must end in an error, not a hang. Closing it closes c. Drivers
// wrap their streams with it, and Sandbox.OpenFile wraps every driver's
// stream again, so the limit holds whatever the driver does.
func LimitReader(r io.Reader, c io.Closer, path string, max int64) io.ReadCloser {
	// A stream that already enforces the same or a tighter limit needs no
	// second layer, and a second layer would hide the inner one's fast path.
	if inner, ok := r.(*limitReader); ok && inner == c && inner.max >= 0 && (max < 0 || inner.max <= max) {
		return inner
	}
	return &limitReader{r: r, c: c, left: max, max: max, path: path}
}

type limitReader struct {
	r    io.Reader
	c    io.Closer
	left int64
	max  int64
	path string
}

func (l *limitReader) tooLarge() error {
	return &TooLargeError{Path: l.path, Size: -1, MaxBytes: l.max}
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.max < 0 {
		return l.r.Read(p)
	}
	if l.left < 0 {
		return 0, l.tooLarge()
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n + int(l.left), l.tooLarge()
	}
	return n, err
}

// WriteTo keeps io.Copy on its fast paths (copy_file_range when r is a host
// file and the destination a file): reads stream at plain-copy speed.
func (l *limitReader) WriteTo(w io.Writer) (int64, error) {
	if l.max < 0 {
		return io.Copy(w, l.r)
	}
	if l.left < 0 {
		return 0, l.tooLarge()
	}
	n, err := io.Copy(w, &io.LimitedReader{R: l.r, N: l.left})
	l.left -= n
	if err != nil || l.left > 0 {
		return n, err // a short file, or a failed copy
	}
	// Exactly max bytes so far: one more byte means the file grew past it.
	var probe [1]byte
	m, err := io.ReadFull(l.r, probe[:])
	if m > 0 {
		l.left = -1
		return n, l.tooLarge()
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	return n, err
}

func (l *limitReader) Close() error { return l.c.Close() }
