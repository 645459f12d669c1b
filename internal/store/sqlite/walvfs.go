package sqlite

import (
	"encoding/binary"
	"fmt"
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
	xShmLockFn     = func(*libc.TLS, uintptr, int32, int32, int32) int32
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

// walFile is the state of an open WAL file. Every method of it, and of its database file, runs on
// the connection that opened both (SQLite serialises a connection's calls); the mutex only makes
// that explicit to the race detector.
type walFile struct {
	mu    sync.Mutex
	pFile uintptr // its sqlite3_file, fixed while it is open
	orig  *sqlite3.Tsqlite3_io_methods
	// db is the connection's database file, whose write-lock release and barrier write the
	// buffer out; nil when it could not be found (then nothing is held: every write goes
	// through, as unix's). wal is the connection's Wal struct, in SQLite's memory.
	db  *dbFile
	wal uintptr
	// name is the file's path, for the tests to find it.
	name string
	// buf holds n bytes of frames not written yet, to go at off; walBufMax bytes of SQLite's
	// allocator, taken at the first write, freed at the close.
	buf uintptr
	n   int
	off int64
	// hwm is the end of the furthest write of the current write transaction: the frontier
	// where SQLite appends frames. fresh: no write yet since the write lock was last released,
	// so the next write (a transaction's first: at the log's end, or its header at 0) sets it.
	hwm   int64
	fresh bool
	// commitPage is the offset of the page of the last commit frame whose header was held
	// (-1: none): the write there is the commit's last, and the buffer goes out after it.
	commitPage int64
	// err is the failure of a write of the buffer that SQLite could not be told of when it
	// happened (a read, a size or a barrier wrote the buffer out): every later write and sync
	// of the transaction fails with it, so that the transaction cannot commit without those
	// frames; the write lock's release (the transaction is over, its frames past the log's
	// end) clears it.
	err int32
}

// dbFile is the state of an open main database file.
type dbFile struct {
	orig *sqlite3.Tsqlite3_io_methods
	wal  *walFile // its connection's WAL, once open
}

// The open wrapped files, by handle (the number kept in their sqlite3_file's tail).
var vfsFiles struct {
	sync.RWMutex
	m    map[uintptr]any // *walFile or *dbFile
	next uintptr
}

// walStats are counters the tests read: the buffers' writes and the safety net's firings.
var walStats struct {
	flushes        atomic.Int64 // writes of a buffer (each one pwrite(2) through unix's xWrite)
	frames         atomic.Int64 // frame headers held
	barrierFlushes atomic.Int64 // buffers a barrier found unwritten (none expected)
}

func handleAt(pFile uintptr) *uintptr {
	return (*uintptr)(cPtr(pFile + walVFS.tail))
}

func fileState[T any](pFile uintptr) T {
	vfsFiles.RLock()
	s := vfsFiles.m[*handleAt(pFile)]
	vfsFiles.RUnlock()
	return s.(T)
}

func addFile(pFile uintptr, state any) {
	vfsFiles.Lock()
	defer vfsFiles.Unlock()
	if vfsFiles.m == nil {
		vfsFiles.m = make(map[uintptr]any)
	}
	vfsFiles.next++
	vfsFiles.m[vfsFiles.next] = state
	*handleAt(pFile) = vfsFiles.next
}

func removeFile(pFile uintptr) {
	vfsFiles.Lock()
	delete(vfsFiles.m, *handleAt(pFile))
	vfsFiles.Unlock()
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
	var (
		state   any
		methods uintptr
	)
	switch {
	case flags&sqlite3.SQLITE_OPEN_WAL != 0:
		db, wal := walDatabase(pFile)
		state = &walFile{pFile: pFile, orig: orig, db: db, wal: wal, name: libc.GoString(zName), commitPage: -1, fresh: true}
		methods = wrappedMethods(tls, "w", orig, func(m *sqlite3.Tsqlite3_io_methods) {
			m.FxClose = cFunc(walClose)
			m.FxRead = cFunc(walRead)
			m.FxWrite = cFunc(walWrite)
			m.FxTruncate = cFunc(walTruncate)
			m.FxSync = cFunc(walSync)
			m.FxFileSize = cFunc(walFileSize)
			m.FxFileControl = cFunc(walFileControl)
		})
	case flags&sqlite3.SQLITE_OPEN_MAIN_DB != 0 && orig.FiVersion >= 2 && orig.FxShmBarrier != 0 && orig.FxShmLock != 0:
		state = &dbFile{orig: orig}
		methods = wrappedMethods(tls, "d", orig, func(m *sqlite3.Tsqlite3_io_methods) {
			m.FxClose = cFunc(dbClose)
			m.FxShmLock = cFunc(dbShmLock)
			m.FxShmBarrier = cFunc(dbShmBarrier)
		})
	default:
		return rc
	}
	if methods == 0 { // out of memory for the copy: the file stays unix's
		return rc
	}
	addFile(pFile, state)
	f.FpMethods = methods
	if w, ok := state.(*walFile); ok && w.db != nil {
		w.db.wal = w
	}
	return rc
}

// walDatabase is the database file of the connection opening the WAL file pFile, and its Wal. SQLite's pager
// allocates the WAL's sqlite3_file right after its Wal struct (sqlite3WalOpen: pWalFd =
// &pRet[1]), whose pDbFd is the database file, set before the WAL is opened. The layout is
// checked (the Wal's pWalFd must be pFile, its database file one of ours) rather than trusted:
// with another, the WAL is not buffered.
func walDatabase(pFile uintptr) (*dbFile, uintptr) {
	p := pFile - unsafe.Sizeof(sqlite3.TWal{})
	w := (*sqlite3.TWal)(cPtr(p))
	if w.FpWalFd != pFile || w.FpDbFd == 0 {
		return nil, 0
	}
	vfsFiles.RLock()
	defer vfsFiles.RUnlock()
	d, _ := vfsFiles.m[*handleAt(w.FpDbFd)].(*dbFile)
	return d, p
}

// wrappedMethods is the io_methods of a wrapped file whose unix methods are orig: a copy of
// them with the wrapped ones set by wrap, made once per kind and original; 0 when out of memory.
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
		return 0
	}
	m := (*sqlite3.Tsqlite3_io_methods)(cPtr(p))
	*m = *orig
	wrap(m)
	walVFS.methods.Store(key, p)
	return p
}

// flush writes the buffer out with one call of unix's xWrite; the buffer is empty after it,
// written or not. A failure is kept in w.err for the transaction's later writes and syncs, as
// well as returned. w.mu is held.
func (w *walFile) flush(tls *libc.TLS) int32 {
	n := w.n
	if n == 0 {
		return sqlite3.SQLITE_OK
	}
	w.n = 0
	walStats.flushes.Add(1)
	rc := goFunc[xReadWriteFn](w.orig.FxWrite)(tls, w.pFile, w.buf, int32(n), w.off)
	if rc != sqlite3.SQLITE_OK && w.err == sqlite3.SQLITE_OK {
		w.err = rc
	}
	return rc
}

func walWrite(tls *libc.TLS, pFile, zBuf uintptr, iAmt int32, iOfst int64) int32 {
	w := fileState[*walFile](pFile)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != sqlite3.SQLITE_OK {
		return w.err
	}
	if w.fresh || iOfst == 0 {
		// A write transaction's first write is at the log's end (or its header at 0, starting
		// it over): the frontier.
		w.hwm, w.fresh = iOfst, false
	}
	// Only frames appended at the frontier are held. A write below it rewrites what the
	// transaction wrote already (a frame a spill wrote and the commit writes again, the
	// headers walRewriteChecksums writes back) and goes through at once: its commit's end
	// would not be told by its page's write (the checksums' headers come without one).
	hold := iOfst >= w.hwm && int(iAmt) <= walBufMax && w.holds()
	w.hwm = max(w.hwm, iOfst+int64(iAmt))
	if w.n > 0 && (!hold || iOfst != w.off+int64(w.n) || w.n+int(iAmt) > walBufMax) {
		if rc := w.flush(tls); rc != sqlite3.SQLITE_OK {
			return rc
		}
	}
	ends := iOfst == w.commitPage
	w.commitPage = -1
	if !hold {
		return goFunc[xReadWriteFn](w.orig.FxWrite)(tls, pFile, zBuf, iAmt, iOfst)
	}
	if w.buf == 0 {
		if w.buf = libc.Xmalloc(tls, walBufMax); w.buf == 0 {
			return goFunc[xReadWriteFn](w.orig.FxWrite)(tls, pFile, zBuf, iAmt, iOfst)
		}
	}
	src := unsafe.Slice((*byte)(cPtr(zBuf)), iAmt)
	if iAmt == walFrameHeaderSize {
		walStats.frames.Add(1)
		if binary.BigEndian.Uint32(src[4:8]) != 0 {
			w.commitPage = iOfst + walFrameHeaderSize
		}
	}
	if w.n == 0 {
		w.off = iOfst
	}
	w.n += copy(unsafe.Slice((*byte)(cPtr(w.buf)), walBufMax)[w.n:], src)
	if ends {
		return w.flush(tls)
	}
	return sqlite3.SQLITE_OK
}

// holds reports whether the WAL may hold frames now: its database file is known, and its Wal is
// neither in exclusive locking mode nor padding commits to a sector. In exclusive mode (and with
// a heap-memory wal-index) the write lock is never released through xShmLock, where a rolled-back
// spill's frames and a kept write error would be dealt with; with padding (no
// SQLITE_IOCAP_POWERSAFE_OVERWRITE, psow=0) SQLite splits the writes of a commit's padding frames
// at a sync point, so that the commit's last bytes do not follow its commit frame's header. A
// second review reproduced both: a rolled-back spill's frames written over another writer's
// commit after leaving exclusive mode, a connection failing every write after one failure, and a
// padded commit's tail left to the barrier. historyd uses neither (its DSN leaves locking_mode
// NORMAL and psow at 1); read each write, as both can change while the file is open.
func (w *walFile) holds() bool {
	if w.db == nil {
		return false
	}
	wal := (*sqlite3.TWal)(cPtr(w.wal))
	return wal.FexclusiveMode == 0 && wal.FpadToSectorBoundary == 0
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
	return w.then(tls, func() int32 {
		if w.err != sqlite3.SQLITE_OK {
			return w.err
		}
		return goFunc[xSyncFn](w.orig.FxSync)(tls, pFile, flags)
	})
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
	w := fileState[*walFile](pFile)
	rc := w.then(tls, func() int32 { return sqlite3.SQLITE_OK })
	if w.buf != 0 {
		libc.Xfree(tls, w.buf)
		w.buf = 0
	}
	if w.db != nil && w.db.wal == w {
		w.db.wal = nil
	}
	if crc := goFunc[xCloseFn](w.orig.FxClose)(tls, pFile); rc == sqlite3.SQLITE_OK {
		rc = crc
	}
	removeFile(pFile)
	return rc
}

func dbClose(tls *libc.TLS, pFile uintptr) int32 {
	d := fileState[*dbFile](pFile)
	rc := goFunc[xCloseFn](d.orig.FxClose)(tls, pFile)
	if d.wal != nil {
		d.wal.mu.Lock()
		d.wal.db = nil
		d.wal.mu.Unlock()
	}
	removeFile(pFile)
	return rc
}

// walWriteLock is the wal-index lock a write transaction holds (WAL_WRITE_LOCK).
const walWriteLock = 0

// dbShmLock writes the connection's WAL buffer out before the write lock is released, as unix's
// would have written every byte by then: what a transaction that rolled back after a spill left
// held is written before another writer can append where it lies (a later flush would write it
// over that writer's frames). The transaction is over, so a failure to write it is nobody's (its
// frames lie past the log's end) and a write error kept for it is cleared.
func dbShmLock(tls *libc.TLS, pFile uintptr, ofst, n, flags int32) int32 {
	d := fileState[*dbFile](pFile)
	if flags == sqlite3.SQLITE_SHM_UNLOCK|sqlite3.SQLITE_SHM_EXCLUSIVE && ofst <= walWriteLock && walWriteLock < ofst+n {
		if w := d.wal; w != nil {
			w.mu.Lock()
			w.flush(tls)
			w.err, w.fresh, w.commitPage = sqlite3.SQLITE_OK, true, -1
			w.mu.Unlock()
		}
	}
	return goFunc[xShmLockFn](d.orig.FxShmLock)(tls, pFile, ofst, n, flags)
}

// dbShmBarrier is the safety net. SQLite calls it on a connection's database file when it
// publishes a commit (between the two copies of the wal-index header), and at the start of its
// read transactions. The commit's frames are written out at its commit frame, and a transaction
// begins with nothing held, so it never finds the connection's WAL holding any
// (walStats.barrierFlushes stays 0, which TestWALVFSCommitsReachTheFile checks under concurrent
// readers). If it did, they are written before the header that makes them visible; a failure is
// kept for the transaction's later writes (it cannot be returned: a barrier has no result).
func dbShmBarrier(tls *libc.TLS, pFile uintptr) {
	d := fileState[*dbFile](pFile)
	if w := d.wal; w != nil {
		w.mu.Lock()
		if w.n > 0 {
			walStats.barrierFlushes.Add(1)
			w.flush(tls)
		}
		w.mu.Unlock()
	}
	goFunc[xShmBarrierFn](d.orig.FxShmBarrier)(tls, pFile)
}
