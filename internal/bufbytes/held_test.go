package bufbytes

import "testing"

// TestHeldFollowsTheReader: what is held is the sum of the items still in the channel, however the
// reader takes them; the record of sizes does not grow while a reader keeps up, nor past what a
// reader that stays behind leaves in the channel.
func TestHeldFollowsTheReader(t *testing.T) {
	ch := make(chan int64, 300)
	var h Held
	var want int64
	for i := int64(1); i <= 10_000; i++ {
		h.Release(len(ch))
		if i%3 != 0 && len(ch) > 0 { // the reader takes one item in three sends, then catches up
			want -= <-ch
		}
		if len(ch) == cap(ch) {
			for len(ch) > 200 {
				want -= <-ch
			}
			h.Release(len(ch))
		}
		ch <- i
		h.Add(i)
		want += i
		if got := h.Bytes(); got < want {
			t.Fatalf("after %d sends: held %d, less than the %d in the channel", i, got, want)
		}
		if cap(h.sizes) > 4*cap(ch) {
			t.Fatalf("after %d sends: the sizes record grew to %d for a channel of %d", i, cap(h.sizes), cap(ch))
		}
	}
	h.Release(len(ch))
	if h.Bytes() != want {
		t.Errorf("held %d, the channel holds %d", h.Bytes(), want)
	}
	if fits, empty := h.Fits(1<<40, 1), h.Bytes() == 0; fits != empty {
		t.Errorf("Fits(an item past the bound) = %v with %d bytes held: it fits an empty buffer only", fits, h.Bytes())
	}
	var empty Held
	if !empty.Fits(1<<40, 1) {
		t.Error("an item past the bound does not fit an empty buffer")
	}
}
