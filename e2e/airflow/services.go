package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The Celery deployment's own PostgreSQL (metadata database and Celery
// result backend) and Redis (broker), from the machine's Debian packages
// (scripts/ensure-tools.sh installs them), each a private instance in the
// work directory on the control plane's address: never the machine's
// system services.

// postgres is a running PostgreSQL server with one database, airflow.
type postgres struct {
	proc     *proc
	addr     string // host:port
	password string
}

// postgresBin finds the newest PostgreSQL server installed the Debian
// way (/usr/lib/postgresql/<major>/bin), or dir when given.
func postgresBin(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(found, func(i, j int) bool { return majorOf(found[i]) > majorOf(found[j]) })
	if len(found) == 0 {
		return "", errors.New("no PostgreSQL server under /usr/lib/postgresql/*/bin: install it (apt-get install postgresql; scripts/ensure-tools.sh does, with EXECUTOR=celery) or pass -pg-bin DIR")
	}
	return filepath.Dir(found[0]), nil
}

func majorOf(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// unprivileged is how a server that refuses to run as root (PostgreSQL)
// runs when the driver is root: as nobody, through setpriv(1). Empty when
// the driver is not root.
func unprivileged() ([]string, *user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no user nobody to run it as: %w", err)
	}
	return []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--"}, u, nil
}

// startPostgres initialises a cluster under dir and runs it on host,
// password authentication over TCP, then creates the airflow database.
// Durability is off (fsync, full pages): it is thrown away after the run.
func startPostgres(ctx context.Context, o options, dir, host, logs string) (*postgres, error) {
	bin, err := postgresBin(o.pgBin)
	if err != nil {
		return nil, err
	}
	as, u, err := unprivileged()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &postgres{password: randomHex(16)}
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(p.password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if u != nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, path := range []string{dir, pwfile} {
			if err := os.Chown(path, uid, gid); err != nil {
				return nil, fmt.Errorf("handing %s to nobody, whom PostgreSQL runs as: %w", path, err)
			}
		}
	}
	data := filepath.Join(dir, "data")
	initdb := append(as, filepath.Join(bin, "initdb"), "-D", data, "-U", "airflow", "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions")
	if err := runBounded(ctx, 2*time.Minute, "initdb", filepath.Join(logs, "initdb.log"), os.Environ(), initdb...); err != nil {
		return nil, err
	}
	_ = os.Remove(pwfile)
	// initdb lets in loopback clients only; the workers come over the
	// bridge, from the server's own subnet.
	hba, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	_, err = hba.WriteString("host airflow airflow samenet scram-sha-256\n")
	if cerr := hba.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	port, err := freePortOn(host)
	if err != nil {
		return nil, err
	}
	p.addr = net.JoinHostPort(host, port)
	server := append(as, filepath.Join(bin, "postgres"), "-D", data, "-h", host, "-p", port, "-k", dir,
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off", "-c", "max_connections=300")
	if p.proc, err = startProc("postgres", filepath.Join(logs, "postgres.log"), os.Environ(), server...); err != nil {
		return nil, err
	}
	psql := func(what string, args ...string) error {
		argv := append(as, append([]string{filepath.Join(bin, "psql"), "-h", dir, "-p", port, "-U", "airflow", "-d", "postgres", "-v", "ON_ERROR_STOP=1"}, args...)...)
		return runBounded(ctx, time.Minute, what, filepath.Join(logs, "psql.log"), os.Environ(), argv...)
	}
	err = poll(ctx, 2*time.Minute, 500*time.Millisecond, "PostgreSQL to accept connections", p.alive, func() (bool, string, error) {
		if err := psql("psql (is PostgreSQL up?)", "-c", "select 1"); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err == nil {
		err = psql("createdb", "-c", "create database airflow")
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *postgres) alive() error {
	if done, err := p.proc.exited(); done {
		return fmt.Errorf("PostgreSQL exited (%v); the end of its log (%s):\n%s", err, p.proc.log, p.proc.tail(30))
	}
	return nil
}

// url is the database's SQLAlchemy URL for driver ("postgresql+psycopg2",
// or "db+postgresql+psycopg2" for Celery's result backend).
func (p *postgres) url(driver string) string {
	return driver + "://airflow:" + url.QueryEscape(p.password) + "@" + p.addr + "/airflow"
}

func (p *postgres) stop() {
	p.proc.stop(30 * time.Second)
}

// redisServer is a running Redis with a password, appending every write
// to its log so a stop and start keeps the queued messages, as a broker
// restarted by its service manager does.
type redisServer struct {
	bin      string
	proc     *proc
	conf     string
	logs     string // directory of its logs, one per start
	starts   int
	addr     string
	password string
}

func startRedis(ctx context.Context, dir, host, logs string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is missing: install it (apt-get install redis-server; scripts/ensure-tools.sh does, with EXECUTOR=celery)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	port, err := freePortOn(host)
	if err != nil {
		return nil, err
	}
	r := &redisServer{bin: bin, conf: filepath.Join(dir, "redis.conf"), logs: logs,
		addr: net.JoinHostPort(host, port), password: randomHex(16)}
	// The password goes in a 0600 file, not argv (process listings).
	conf := strings.Join([]string{
		"bind " + host, "port " + port, "requirepass " + r.password, "dir " + dir,
		"daemonize no", "save \"\"", "appendonly yes", "appendfsync no", "logfile \"\"",
	}, "\n") + "\n"
	if err := os.WriteFile(r.conf, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return r, r.start(ctx)
}

// start runs the server (again, after stop) and waits until it answers.
func (r *redisServer) start(ctx context.Context) error {
	r.starts++
	log := filepath.Join(r.logs, fmt.Sprintf("redis-%d.log", r.starts))
	p, err := startProc("redis", log, os.Environ(), r.bin, r.conf)
	if err != nil {
		return err
	}
	r.proc = p
	return poll(ctx, time.Minute, 200*time.Millisecond, "Redis to answer", r.alive, func() (bool, string, error) {
		if err := r.ping(); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
}

func (r *redisServer) alive() error {
	if done, err := r.proc.exited(); done {
		return fmt.Errorf("Redis exited (%v); the end of its log (%s):\n%s", err, r.proc.log, r.proc.tail(30))
	}
	return nil
}

// ping authenticates and pings over RESP.
func (r *redisServer) ping() error {
	c, err := net.DialTimeout("tcp", r.addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "AUTH %s\r\nPING\r\n", r.password); err != nil {
		return err
	}
	rd := bufio.NewReader(c)
	for _, want := range []string{"+OK", "+PONG"} {
		line, err := rd.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) != want {
			return fmt.Errorf("redis answered %q, want %s", strings.TrimSpace(line), want)
		}
	}
	return nil
}

// url is the Celery broker URL.
func (r *redisServer) url() string {
	return "redis://:" + url.QueryEscape(r.password) + "@" + r.addr + "/0"
}

// stop shuts the server down as its service manager would (SIGTERM: it
// flushes its append-only file and exits) and waits for it.
func (r *redisServer) stop() {
	r.proc.stop(30 * time.Second)
}

// freePortOn finds a port free on host.
func freePortOn(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port), nil
}
