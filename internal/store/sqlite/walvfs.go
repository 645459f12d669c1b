package sqlite

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// The "historyd" VFS is SQLite's own unix VFS with one difference: the frames a transaction
// appends to the WAL reach the file in one pwrite(2) at its commit, where SQLite writes each
// frame's 24-byte header and its page with a call each (walWriteOneFrame). A 1 KB AddMessage
// dirties about five pages no other write of its batch shares, so that was about ten system
// calls a write on the single writer goroutine; on these machines a pwrite(2) of a page costs
// about 2.9 µs of CPU, and one of sixteen frames about 1 µs a frame (docs/decisions/0022).
//
// What stays SQLite's: every byte written, its offset, and the order of the writes against
// everything a reader can see. SQLite makes appended frames visible to readers only by
// updating the wal-index header after walFrames returns, so the buffer is written out:
//   - at the end of the commit frame (the one whose header carries the database's size in
//     pages, WAL format: bytes 4-7 of a frame header, non-zero only in a commit's last frame);
//     only frames appended at the log's frontier are held, every other write goes through
//     at once (walWrite says which);
//   - before anything else done with the file: a read, a sync (--sync=full's fsync), a
//     truncate, a size, a file control, a close, and a write that does not append to the
//     buffer (the WAL header of a restarted log, a frame rewritten in place);
//   - when it holds walBufMax bytes;
//   - and, as a safety net that a test checks never fires, at the database file's
//     xShmBarrier, which SQLite calls between the two copies of the wal-index header it
//     writes to publish a commit (walIndexWriteHdr).
//
// Crash safety is unchanged: bytes still in the buffer belong to a transaction that has not
// committed (its commit frame flushes them before COMMIT returns), which a kill -9 loses as it
// loses one whose frames reached the file without their commit frame. A failed write of the
// buffer is the commit's failure (SQLite rolls the transaction back; the frames past the
// wal-index's last are ignored by every reader and recovery).
//
// Only the WAL file and the main database file are wrapped; every other file (journals, temp
// files) is unix's as it is. Every connection historyd opens uses this VFS (dsn), so that
// the barrier can find the WAL buffered for its database; only the write connection ever
// buffers anything.
const (
	walVFSName = "historyd"
	// walBufMax bounds a WAL file's buffer, and so one call of unix's xWrite: 30 frames of
	// 4 KiB pages. It must stay under 128 KiB: os_unix.c's seekAndWriteFd writes at most
	// 0x1ffff bytes a call ("nBuf &= 0x1ffff"; 128 KiB exactly would write nothing and fail
	// as a full disk).
	walBufMax = 30 * (4096 + walFrameHeaderSize)
	// walFrameHeaderSize is the WAL format's frame header (WAL_FRAME_HDRSIZE).
	walFrameHeaderSize = 24
)

// The C function types of the methods wrapped, as modernc's transpiled SQLite calls them.
type (
	xOpenFn        = func(*libc.TLS, uintptr, uintptr, uintptr, int32, uintptr) int32
	xCloseFn       = func(*libc.TLS, uintptr) int32
	xReadWriteFn   = func(*libc.TLS, uintptr, uintptr, int32, int64) int32
	xTruncateFn    = func(*libc.TLS, uintptr, int64) int32
	xSyncFn        = func(*libc.TLS, uintptr, int32) int32
	xFileSizeFn    = func(*libc.TLS, uintptr, uintptr) int32
	xFileControlFn = func(*libc.TLS, uintptr, int32, uintptr) int32
	xShmBarrierFn  = func(*libc.TLS, uintptr)
)

// cFunc is a Go function as the transpiled C holds a function pointer (its funcval), as
// modernc's own __ccgo_fp makes them. Only top-level functions are passed: their funcvals are
// static, so the pointer needs nothing to keep it alive.
func cFunc(f any) uintptr {
	type iface [2]uintptr
	return (*iface)(unsafe.Pointer(&f))[1]
}

// cPtr is the address a C pointer holds: memory of SQLite's allocator (outside Go's heap), or
// a Go global's or a live buffer's, never moved. Reading the bits through a pointer, rather
// than converting the uintptr, says so to vet's unsafeptr check, which cannot know it.
func cPtr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// goFunc is the function behind a C function pointer, callable from Go.
func goFunc[F any](p uintptr) F { return *(*F)(unsafe.Pointer(&p)) }

// walVFS is the registered VFS's state, set once by registerWALVFS.
var walVFS struct {
	once sync.Once
	mu   sync.Mutex // making a methods copy
	err  error
	vfs  uintptr // the registered sqlite3_vfs: unix's with our xOpen and a bigger file
	unix uintptr // unix's sqlite3_vfs, which every open is passed on to
	open uintptr // unix's xOpen
	// tail is where, in each sqlite3_file SQLite allocates, the handle of a wrapped file's
	// state sits: past unix's own file struct.
	tail uintptr
	// methods: the wrapped files' io_methods, one per io_methods of unix's that a wrapped file
	// had (keyed "w"/"d" and the original's address); never freed (SQLite points files at them).
	methods sync.Map
}

// Everything SQLite's code reaches through a pointer (the VFS, the io_methods, the buffers it
// writes from) is in its allocator's memory, never Go's: the transpiled C does arithmetic on
// such pointers, which -race's checkptr refuses on a Go allocation.
func cAlloc(tls *libc.TLS, size uintptr) uintptr {
	return libc.Xcalloc(tls, 1, libc.Tsize_t(size))
}

// registerWALVFS registers the "historyd" VFS once in the process.
func registerWALVFS() error {
	walVFS.once.Do(func() { walVFS.err = doRegisterWALVFS() })
	return walVFS.err
}

func doRegisterWALVFS() error {
	tls := libc.NewTLS()
	defer tls.Close()
	unixName, err := libc.CString("unix")
	if err != nil {
		return err
	}
	defer libc.Xfree(tls, unixName)
	unix := sqlite3.Xsqlite3_vfs_find(tls, unixName)
	if unix == 0 {
		return fmt.Errorf("sqlite: no unix VFS to wrap")
	}
	name, err := libc.CString(walVFSName) // never freed: the VFS is registered for good
	if err != nil {
		return err
	}
	u := (*sqlite3.Tsqlite3_vfs)(cPtr(unix))
	walVFS.unix, walVFS.open = unix, u.FxOpen
	walVFS.tail = (uintptr(u.FszOsFile) + 7) &^ 7
	walVFS.vfs = cAlloc(tls, unsafe.Sizeof(sqlite3.Tsqlite3_vfs{}))
	if walVFS.vfs == 0 {
		return fmt.Errorf("sqlite: registering the %s VFS: out of memory", walVFSName)
	}
	v := (*sqlite3.Tsqlite3_vfs)(cPtr(walVFS.vfs))
	*v = *u
	v.FpNext = 0
	v.FzName = name
	v.FszOsFile = int32(walVFS.tail + unsafe.Sizeof(uintptr(0)))
	v.FxOpen = cFunc(walVFSOpen)
	if rc := sqlite3.Xsqlite3_vfs_register(tls, walVFS.vfs, 0); rc != sqlite3.SQLITE_OK {
		return fmt.Errorf("sqlite: registering the %s VFS: code %d", walVFSName, rc)
	}
	return nil
}

// walFile is the state of an open WAL file. Its mutex is held through every wrapped method:
// the barrier of another connection (the safety net) may write the buffer out.
type walFile struct {
	mu    sync.Mutex
	pFile uintptr // its sqlite3_file, fixed while it is open
	orig  *sqlite3.Tsqlite3_io_methods
	db    string // the database's path, which the barrier names
	// buf holds n bytes of frames not written yet, to go at off; walBufMax bytes of SQLite's
	// allocator, taken at the first write, freed at the close.
	buf uintptr
	n   int
	off int64
	// hwm is the end of the furthest write since the log last started over: the frontier
	// where SQLite appends frames.
	hwm int64
	// commitPage is the offset of the page of the last commit frame whose header was
	// written (-1: none): the write there is the commit's last, and the buffer goes out
	// after it.
	commitPage int64
}

// dbFile is the state of an open main database file: what its barrier needs.
type dbFile struct {
	orig *sqlite3.Tsqlite3_io_methods
	path string
}

// The open wrapped files, by handle (the number kept in their sqlite3_file's tail).
var (
	vfsFiles      sync.Map // uintptr -> *walFile or *dbFile
	vfsNextHandle atomic.Uintptr
	// walPending counts the WAL files holding unwritten bytes, so that a barrier with none
	// (every commit's, in practice) costs one atomic load.
	walPending atomic.Int64
)

// walStats are counters the tests read: the buffers' writes and the safety net's firings.
var walStats struct {
	flushes        atomic.Int64 // writes of a buffer (each one pwrite(2) through unix's xWrite)
	frames         atomic.Int64 // frame headers buffered
	barrierFlushes atomic.Int64 // buffers the barrier found unwritten (none expected)
}

func handleAt(pFile uintptr) *uintptr {
	return (*uintptr)(cPtr(pFile + walVFS.tail))
}

func fileState[T any](pFile uintptr) T {
	s, _ := vfsFiles.Load(*handleAt(pFile))
	return s.(T)
}

// walVFSOpen opens a file through unix's xOpen, then wraps the WAL and the main database.
func walVFSOpen(tls *libc.TLS, pVfs, zName, pFile uintptr, flags int32, pOutFlags uintptr) int32 {
	*handleAt(pFile) = 0
	rc := goFunc[xOpenFn](walVFS.open)(tls, walVFS.unix, zName, pFile, flags, pOutFlags)
	f := (*sqlite3.Tsqlite3_file)(cPtr(pFile))
	if rc != sqlite3.SQLITE_OK || f.FpMethods == 0 || zName == 0 {
		return rc
	}
	orig := (*sqlite3.Tsqlite3_io_methods)(cPtr(f.FpMethods))
	var state any
	switch {
	case flags&sqlite3.SQLITE_OPEN_WAL != 0:
		state = &walFile{pFile: pFile, orig: orig, db: strings.TrimSuffix(libc.GoString(zName), "-wal"), commitPage: -1}
		f.FpMethods = wrappedMethods(tls, "w", orig, func(m *sqlite3.Tsqlite3_io_methods) {
			m.FxClose = cFunc(walClose)
			m.FxRead = cFunc(walRead)
			m.FxWrite = cFunc(walWrite)
			m.FxTruncate = cFunc(walTruncate)
			m.FxSync = cFunc(walSync)
			m.FxFileSize = cFunc(walFileSize)
			m.FxFileControl = cFunc(walFileControl)
		})
	case flags&sqlite3.SQLITE_OPEN_MAIN_DB != 0 && orig.FiVersion >= 2 && orig.FxShmBarrier != 0:
		state = &dbFile{orig: orig, path: libc.GoString(zName)}
		f.FpMethods = wrappedMethods(tls, "d", orig, func(m *sqlite3.Tsqlite3_io_methods) {
			m.FxClose = cFunc(dbClose)
			m.FxShmBarrier = cFunc(dbShmBarrier)
		})
	default:
		return rc
	}
	h := vfsNextHandle.Add(1)
	vfsFiles.Store(h, state)
	*handleAt(pFile) = h
	return rc
}

// wrappedMethods is the io_methods of a wrapped file whose unix methods are orig: a copy of
// them with the wrapped ones set by wrap, made once per kind and original.
func wrappedMethods(tls *libc.TLS, kind string, orig *sqlite3.Tsqlite3_io_methods, wrap func(*sqlite3.Tsqlite3_io_methods)) uintptr {
	key := fmt.Sprintf("%s%x", kind, uintptr(unsafe.Pointer(orig)))
	if m, ok := walVFS.methods.Load(key); ok {
		return m.(uintptr)
	}
	walVFS.mu.Lock() // one copy per key, never freed: made under a lock rather than raced
	defer walVFS.mu.Unlock()
	if m, ok := walVFS.methods.Load(key); ok {
		return m.(uintptr)
	}
	p := cAlloc(tls, unsafe.Sizeof(sqlite3.Tsqlite3_io_methods{}))
	if p == 0 {
		return uintptr(unsafe.Pointer(orig)) // out of memory: the file stays unix's, unwrapped
	}
	m := (*sqlite3.Tsqlite3_io_methods)(cPtr(p))
	*m = *orig
	wrap(m)
	walVFS.methods.Store(key, p)
	return p
}

// flush writes the buffer out with one call of unix's xWrite; the buffer is empty after it,
// written or not (a failed write is the failure of the transaction whose frames it held).
// w.mu is held.
func (w *walFile) flush(tls *libc.TLS) int32 {
	n := w.n
	if n == 0 {
		return sqlite3.SQLITE_OK
	}
	w.n = 0
	walPending.Add(-1)
	walStats.flushes.Add(1)
	return goFunc[xReadWriteFn](w.orig.FxWrite)(tls, w.pFile, w.buf, int32(n), w.off)
}

func walWrite(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	w := fileState[*walFile](pFile)
	w.mu.Lock()
	defer w.mu.Unlock()
	if iOfst == 0 { // the WAL's header: a new log (the first, or a restart's) starts over
		w.hwm = 0
	}
	// Only frames appended at the log's frontier are gathered. A write below it rewrites what
	// is in the file already (a frame a spill wrote and the commit writes again, the headers
	// walRewriteChecksums writes back, the frames after a rolled-back spill's) and goes
	// through at once: its commit's end would not be told by its page's write (the checksums'
	// headers come without one).
	frontier := iOfst >= w.hwm
	w.hwm = max(w.hwm, iOfst+int64(iAmt))
	if w.n > 0 && (!frontier || iOfst != w.off+int64(w.n) || w.n+int(iAmt) > walBufMax) {
		if rc := w.flush(tls); rc != sqlite3.SQLITE_OK {
			return rc
		}
	}
	ends := iOfst == w.commitPage
	w.commitPage = -1
	if !frontier || int(iAmt) > walBufMax {
		return goFunc[xReadWriteFn](w.orig.FxWrite)(tls, pFile, zBuf, iAmt, iOfst)
	}
	src := unsafe.Slice((*byte)(cPtr(zBuf)), iAmt)
	if iAmt == walFrameHeaderSize {
		walStats.frames.Add(1)
		if binary.BigEndian.Uint32(src[4:8]) != 0 {
			w.commitPage = iOfst + walFrameHeaderSize
		}
	}
	if w.buf == 0 {
		if w.buf = libc.Xmalloc(tls, walBufMax); w.buf == 0 {
			return goFunc[xReadWriteFn](w.orig.FxWrite)(tls, pFile, zBuf, iAmt, iOfst)
		}
	}
	if w.n == 0 {
		w.off = iOfst
		walPending.Add(1)
	}
	w.n += copy(unsafe.Slice((*byte)(cPtr(w.buf)), walBufMax)[w.n:], src)
	if ends {
		return w.flush(tls)
	}
	return sqlite3.SQLITE_OK
}

// then runs a method of unix's on the WAL file once the buffer is written out.
func (w *walFile) then(tls *libc.TLS, call func() int32) int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rc := w.flush(tls); rc != sqlite3.SQLITE_OK {
		return rc
	}
	return call()
}

func walRead(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	w := fileState[*walFile](pFile)
	return w.then(tls, func() int32 { return goFunc[xReadWriteFn](w.orig.FxRead)(tls, pFile, zBuf, iAmt, iOfst) })
}

func walTruncate(tls *libc.TLS, pFile uintptr, size int64) int32 {
	w := fileState[*walFile](pFile)
	return w.then(tls, func() int32 {
		w.hwm = min(w.hwm, size)
		return goFunc[xTruncateFn](w.orig.FxTruncate)(tls, pFile, size)
	})
}

func walSync(tls *libc.TLS, pFile uintptr, flags int32) int32 {
	w := fileState[*walFile](pFile)
	return w.then(tls, func() int32 { return goFunc[xSyncFn](w.orig.FxSync)(tls, pFile, flags) })
}

func walFileSize(tls *libc.TLS, pFile, pSize uintptr) int32 {
	w := fileState[*walFile](pFile)
	return w.then(tls, func() int32 { return goFunc[xFileSizeFn](w.orig.FxFileSize)(tls, pFile, pSize) })
}

func walFileControl(tls *libc.TLS, pFile uintptr, op int32, pArg uintptr) int32 {
	w := fileState[*walFile](pFile)
	return w.then(tls, func() int32 { return goFunc[xFileControlFn](w.orig.FxFileControl)(tls, pFile, op, pArg) })
}

func walClose(tls *libc.TLS, pFile uintptr) int32 {
	h := *handleAt(pFile)
	w := fileState[*walFile](pFile)
	rc := w.then(tls, func() int32 { return sqlite3.SQLITE_OK })
	if w.buf != 0 {
		libc.Xfree(tls, w.buf)
		w.buf = 0
	}
	if crc := goFunc[xCloseFn](w.orig.FxClose)(tls, pFile); rc == sqlite3.SQLITE_OK {
		rc = crc
	}
	vfsFiles.Delete(h)
	return rc
}

func dbClose(tls *libc.TLS, pFile uintptr) int32 {
	h := *handleAt(pFile)
	d := fileState[*dbFile](pFile)
	rc := goFunc[xCloseFn](d.orig.FxClose)(tls, pFile)
	vfsFiles.Delete(h)
	return rc
}

// dbShmBarrier is the safety net. A commit's frames are written out at its commit frame, so a
// barrier never finds its database's WAL holding any (walStats.barrierFlushes stays 0, which
// TestWALVFSGathersFrames checks across every kind of write). If one did, they are written
// before the wal-index header that makes them visible; a failure of that write cannot be
// reported (a barrier has no result), as the kernel's failure to write back a page SQLite
// wrote is not.
func dbShmBarrier(tls *libc.TLS, pFile uintptr) {
	d := fileState[*dbFile](pFile)
	if walPending.Load() > 0 {
		vfsFiles.Range(func(_, s any) bool {
			if w, ok := s.(*walFile); ok && w.db == d.path {
				w.mu.Lock()
				if w.n > 0 {
					walStats.barrierFlushes.Add(1)
					w.flush(tls)
				}
				w.mu.Unlock()
			}
			return true
		})
	}
	goFunc[xShmBarrierFn](d.orig.FxShmBarrier)(tls, pFile)
}
