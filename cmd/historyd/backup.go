package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/server"
)

// backupUsage is the usage text of `historyd backup`.
const backupUsage = `usage: historyd backup --to FILE [--force] [--token-file FILE] [--addr HOST:PORT]
                      [--tls] [--tls-ca FILE] [--tls-server-name NAME] [--tls-cert FILE --tls-key FILE]
Asks a running historyd (historyd.v1.AdminService/Backup) for a consistent copy of its sqlite
database and writes it to FILE: the copy holds every write the server acknowledged before the
backup began, and of the writes that raced it whole commits only. The server goes on serving; it
needs free space beside its database of the database's live size plus the larger of 64 MiB and a
tenth of it, and refuses the backup (RESOURCE_EXHAUSTED) without it. FILE is written as
FILE.tmp, checked against the size and SHA-256 the server sends, synced, and only then named FILE,
so FILE is never half written. An existing FILE is refused unless --force. On success it prints one
line: the bytes written and FILE.

Restore: put FILE as historyd.db in an empty directory and start historyd --data-dir on it (docs/operations.md).

Bearer token, for a server with --auth-tokens-file: the first token of --token-file, else
HISTORYD_TOKEN, else the first token of the server's own HISTORYD_AUTH_TOKENS_FILE.
Address and TLS as for historyd healthcheck: --addr defaults to HISTORYD_LISTEN (default
127.0.0.1:50051), and HISTORYD_TLS_CERT (and HISTORYD_TLS_CLIENT_CA) say how to reach a TLS server.
Exit 0 when FILE holds the copy (with a warning on stderr if FILE.tmp could not be removed after),
1 when the backup failed (FILE is then untouched), 2 for invalid flags, 3 when FILE holds the copy
but its directory could not be synced (stderr says why): the copy is whole and checked, but a
crash of the machine may yet lose its name until the filesystem is synced.
`

// backupConfig is the configuration of `historyd backup`.
type backupConfig struct {
	connConfig
	to        string
	force     bool
	tokenFile string
	token     string // the bearer token to send; "" sends none
}

func parseBackup(args []string, getenv func(string) string) (backupConfig, error) {
	var c backupConfig
	fs := flag.NewFlagSet("historyd backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.connConfig.flags(fs)
	fs.StringVar(&c.to, "to", "", "the file to write the copy to")
	fs.BoolVar(&c.force, "force", false, "replace FILE if it exists")
	fs.StringVar(&c.tokenFile, "token-file", "", "a file whose first token is the bearer token to send")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %s", errUsage, flagError(fs, err))
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case c.to == "":
		return c, fmt.Errorf("%w: --to FILE is required: the file to write the copy to", errUsage)
	}
	if err := c.connConfig.resolve(getenv); err != nil {
		return c, err
	}
	var err error
	c.token, err = backupToken(c.tokenFile, getenv)
	return c, err
}

// backupToken returns the bearer token to send: the first of tokenFile, else HISTORYD_TOKEN, else
// the first of the server's own tokens file (so that the command needs nothing more when it runs
// beside the server, like healthcheck), else none.
func backupToken(tokenFile string, getenv func(string) string) (string, error) {
	source := "--token-file"
	switch {
	case tokenFile != "":
	case getenv("HISTORYD_TOKEN") != "":
		return getenv("HISTORYD_TOKEN"), nil
	case getenv("HISTORYD_AUTH_TOKENS_FILE") != "":
		tokenFile, source = getenv("HISTORYD_AUTH_TOKENS_FILE"), "HISTORYD_AUTH_TOKENS_FILE"
	default:
		return "", nil
	}
	f, err := os.Open(tokenFile)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", errUsage, source, err)
	}
	defer f.Close()
	tokens, err := server.ParseTokens(f)
	if err != nil {
		return "", fmt.Errorf("%w: %s %s: %v", errUsage, source, tokenFile, err)
	}
	return tokens[0], nil
}

// backup is `historyd backup` (issue 15): it prints the result (or why there is none) and returns
// the exit code.
func backup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c, err := parseBackup(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, backupUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "historyd backup: %v (historyd backup --help lists the flags)\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	}
	creds, err := c.transport()
	if err != nil {
		fmt.Fprintf(stderr, "historyd backup: %v\n", err)
		return 2
	}
	conn, err := grpc.NewClient(c.addr, creds)
	if err != nil {
		fmt.Fprintf(stderr, "historyd backup: %v\n", err)
		return 2
	}
	defer conn.Close()
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	n, sum, warning, err := backupTo(ctx, historyv1.NewAdminServiceClient(conn), c.to, c.force)
	notSynced, ok := errors.AsType[*dirNotSyncedError](err)
	if err != nil && !ok {
		fmt.Fprintf(stderr, "historyd backup: %v\n", err)
		return 1
	}
	if warning != nil {
		fmt.Fprintf(stderr, "historyd backup: warning: %v\n", warning)
	}
	fmt.Fprintf(stdout, "historyd backup: wrote %d bytes to %s (sha256 %s)\n", n, c.to, hex.EncodeToString(sum))
	if notSynced != nil {
		fmt.Fprintf(stderr, "historyd backup: %v\n", notSynced)
		return 3
	}
	return 0
}

// removeFile is os.Remove, a variable so that a test can make removing FILE.tmp fail.
var removeFile = os.Remove

// backupTo writes the server's copy to FILE.tmp, checks it against the summary, syncs it and names
// it to; on any failure FILE.tmp is removed and to is untouched. It returns the copy's size and
// SHA-256, and a warning when to holds the copy but FILE.tmp, its other name, could not be removed:
// the backup succeeded, and the exit code says so. A *dirNotSyncedError comes with the size and
// SHA-256: to holds the copy, but its directory could not be synced after it was named.
func backupTo(ctx context.Context, client historyv1.AdminServiceClient, to string, force bool) (n int64, sum []byte, warning, err error) {
	if !force {
		if _, err := os.Lstat(to); err == nil {
			return 0, nil, nil, fmt.Errorf("%s exists; give another --to, or --force to replace it", to)
		}
	}
	tmp := to + ".tmp"
	// O_EXCL: a FILE.tmp that exists is another backup's to the same FILE, or one killed mid-way;
	// either way not ours to overwrite.
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return 0, nil, nil, fmt.Errorf("%s exists: another backup to %s is running, or one was interrupted (then remove it)", tmp, to)
		}
		if dir := filepath.Dir(to); errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
				// The command does not make it: a typo in --to would otherwise leave a backup
				// where nobody looks for it.
				return 0, nil, nil, fmt.Errorf("the directory %s does not exist: create it first, or give another --to", dir)
			}
		}
		return 0, nil, nil, err
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			removeFile(tmp) //nolint:errcheck // best effort: the error that brought us here is the one to report
		}
	}()
	h := sha256.New()
	n, err = receiveCopy(ctx, client, io.MultiWriter(f, h), h)
	if err != nil {
		return 0, nil, nil, err
	}
	if err := f.Sync(); err != nil {
		return 0, nil, nil, err
	}
	if err := f.Close(); err != nil {
		return 0, nil, nil, err
	}
	if force {
		err = os.Rename(tmp, to)
	} else if err = os.Link(tmp, to); err == nil { // a link refuses a FILE made since the check above
		// FILE holds the whole copy now: failing to remove its other name is not a failed backup.
		if rmErr := removeFile(tmp); rmErr != nil {
			warning = fmt.Errorf("%s holds the copy, but %s, its temporary name, could not be removed (remove it by hand): %w", to, tmp, rmErr)
		}
	}
	if err != nil {
		return 0, nil, nil, err
	}
	done = true
	// The new name must survive a crash too: sync the directory that holds it. FILE holds the whole
	// copy already and FILE.tmp is gone, so a failure here is not a failed backup (exit 1 promises
	// FILE untouched, and a retry without --force would be refused): it has its own error and exit.
	if err := syncDir(filepath.Dir(to)); err != nil {
		return n, h.Sum(nil), warning, &dirNotSyncedError{file: to, err: err}
	}
	return n, h.Sum(nil), warning, nil
}

// dirNotSyncedError is backupTo's error when FILE holds the checked copy but its directory could
// not be synced: a crash of the machine (not of the command) may yet lose the name.
type dirNotSyncedError struct {
	file string
	err  error
}

func (e *dirNotSyncedError) Error() string {
	return fmt.Sprintf("%s holds the copy, but syncing its directory failed (%v): a crash of this machine may lose the "+
		"name; sync the filesystem (sync -f %s) before relying on it", e.file, e.err, e.file)
}

func (e *dirNotSyncedError) Unwrap() error { return e.err }

// syncDir syncs a directory, so that a name made in it survives a crash; a variable so that a test
// can make it fail.
var syncDir = syncDirectory

// syncDirectory opens dir and syncs it; a directory that cannot be opened cannot be synced either.
func syncDirectory(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// receiveCopy calls Backup and writes the chunks to w, then checks the summary against what was
// written (its size) and sum (w's SHA-256 so far).
func receiveCopy(ctx context.Context, client historyv1.AdminServiceClient, w io.Writer, sum hash.Hash) (int64, error) {
	stream, err := client.Backup(ctx, &historyv1.BackupRequest{})
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return n, fmt.Errorf("the server ended the backup after %d bytes without its summary: the copy is incomplete", n)
		}
		if err != nil {
			return n, err
		}
		switch p := resp.GetPayload().(type) {
		case *historyv1.BackupResponse_Chunk:
			m, err := w.Write(p.Chunk)
			n += int64(m)
			if err != nil {
				return n, err
			}
		case *historyv1.BackupResponse_Summary:
			if got := sum.Sum(nil); p.Summary.GetSizeBytes() != n || !bytes.Equal(p.Summary.GetSha256(), got) {
				return n, fmt.Errorf("the copy received (%d bytes, sha256 %x) is not the one the server sent (%d bytes, sha256 %x)",
					n, got, p.Summary.GetSizeBytes(), p.Summary.GetSha256())
			}
			return n, nil
		default:
			return n, fmt.Errorf("the server sent a backup message this historyd does not know (%T): upgrade it", p)
		}
	}
}
