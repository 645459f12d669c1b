package bufbytes

// Held is the byte count of the items one sender has put into a channel and its reader may not
// have taken yet. Its methods are called by the sender alone (or under the lock every sender
// holds). The zero value is ready: nothing held.
type Held struct {
	sizes []int64 // sizes[head:]: the items sent that the reader may not have taken, oldest first
	head  int
	n     int64 // their sum
}

// Bytes is what is held.
func (h *Held) Bytes() int64 { return h.n }

// Fits reports whether an item of n bytes may join within max bytes: the bytes held with it are at
// most max, or nothing is held (an item larger than max on its own is taken into an empty buffer,
// so a reader that keeps up gets it).
func (h *Held) Fits(n, max int64) bool { return h.n == 0 || h.n+n <= max }

// Add counts an item of n bytes just sent.
func (h *Held) Add(n int64) {
	h.sizes = append(h.sizes, n)
	h.n += n
}

// Release stops counting the items the reader has taken, given how many are still in the channel
// (len of it). The reader takes from the front, so the first of those counted beyond that are
// the ones taken; one taken while this runs is released at the next call, counted until then
// (the safe side).
func (h *Held) Release(inChannel int) {
	for len(h.sizes)-h.head > inChannel {
		h.n -= h.sizes[h.head]
		h.head++
	}
	switch {
	case h.head == len(h.sizes): // drained: reuse the slice from its start
		h.sizes, h.head = h.sizes[:0], 0
	case h.head > 64 && h.head > len(h.sizes)/2: // a reader that never drains: move the rest down
		n := copy(h.sizes, h.sizes[h.head:])
		h.sizes, h.head = h.sizes[:n], 0
	}
}
