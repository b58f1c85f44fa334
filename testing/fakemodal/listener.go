package fakemodal

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"sync"
	"time"
)

// The command router URL Modal hands out is always https://. The two real
// clients dial it differently when the control plane is on localhost: the
// Go SDK in plaintext, the Python client with TLS that verifies nothing. So
// one port speaks both: the first byte of a connection tells a TLS
// ClientHello (0x16) from the h2c preface ("PRI * HTTP/2.0").
const tlsHandshakeByte = 0x16

// sniffListener hands grpc plain connections, terminating TLS itself for
// clients that start a handshake.
type sniffListener struct {
	net.Listener
	tls   *tls.Config
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	// The inner Accept's error once it has failed. Guarded: Accept reads it
	// from grpc's goroutine while the accept loop writes it, and a torn
	// interface read hands grpc a nil *net.OpError (a crash seen in CI).
	mu  sync.Mutex
	err error
}

func newSniffListener(inner net.Listener) (*sniffListener, error) {
	cert, err := selfSignedCert()
	if err != nil {
		return nil, err
	}
	l := &sniffListener{
		Listener: inner,
		tls:      &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}},
		conns:    make(chan net.Conn),
		done:     make(chan struct{}),
	}
	go l.acceptLoop()
	return l, nil
}

func (l *sniffListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.Close()
			return
		}
		// Classified off the accept loop, so a client that connects and
		// sends nothing holds up no one else.
		go l.classify(c)
	}
}

func (l *sniffListener) classify(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) //nolint:errcheck
	r := bufio.NewReader(c)
	first, err := r.Peek(1)
	c.SetReadDeadline(time.Time{}) //nolint:errcheck
	if err != nil {
		c.Close()
		return
	}
	var out net.Conn = &peekedConn{Conn: c, r: r}
	if first[0] == tlsHandshakeByte {
		out = tls.Server(out, l.tls)
	}
	select {
	case l.conns <- out:
	case <-l.done:
		out.Close()
	}
}

func (l *sniffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *sniffListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}

// peekedConn reads through the buffer that holds the peeked byte.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// selfSignedCert is for 127.0.0.1 only; the Python client skips
// verification for a localhost control plane, as it does against Modal's
// own local test servers.
func selfSignedCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "fakemodal task command router"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
