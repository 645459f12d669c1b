package storetest

import (
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// testListMessagesPaging: pages follow the order in both directions with
// no gap and no duplicate, the system first; page_size 0 is the default
// (50), above 1000 is 1000, negative is an error; a token continues only
// its own query of its own branch incarnation, and goes stale when the
// branch is cleared (docs/development.md#style-proto: lists are paginated, opaque tokens).
func testListMessagesPaging(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	var want []uuid.UUID
	for i := range 120 {
		want = append(want, addInstruction(t, st, b, strconv.Itoa(i)).Message.Message.ID)
	}
	// A system set after the messages is listed first.
	s := addFactory(t, st, b, store.Factory{System: text("S")}).Message.Message
	want = append([]uuid.UUID{s.ID}, want...)

	for _, size := range []int{1, 7, 50, 121, 500} {
		if got := ids(t, listAll(t, st, b, store.ListInput{PageSize: size})); !sameIDs(got, want) {
			t.Errorf("page size %d: %d ids, want %d in order", size, len(got), len(want))
		}
		got := ids(t, listAll(t, st, b, store.ListInput{PageSize: size, Descending: true}))
		for i := range got {
			if got[i] != want[len(want)-1-i] {
				t.Errorf("page size %d descending: position %d = %s", size, i, got[i])
				break
			}
		}
	}
	page, err := st.ListMessages(ctx(t), b, store.ListInput{})
	if err != nil || len(page.Messages) != store.DefaultPageSize || page.NextPageToken == "" {
		t.Errorf("default page: %d messages, token %q, %v", len(page.Messages), page.NextPageToken, err)
	}
	if page.Head != head(t, st, b) {
		t.Errorf("page head %d", page.Head)
	}
	_, err = st.ListMessages(ctx(t), b, store.ListInput{PageSize: -1})
	wantErr(t, err, envelope.ErrInvalid)

	// A token continues only the query it came from.
	_, err = st.ListMessages(ctx(t), b, store.ListInput{PageToken: page.NextPageToken, Descending: true})
	wantErr(t, err, store.ErrStalePageToken)
	other := newBranch(t, st)
	_, err = st.ListMessages(ctx(t), other, store.ListInput{PageToken: page.NextPageToken})
	wantErr(t, err, store.ErrStalePageToken)
	_, err = st.ListMessages(ctx(t), b, store.ListInput{PageToken: "not a token"})
	wantErr(t, err, store.ErrStalePageToken)

	// Messages added after a page was read are reached by its token.
	first, _ := st.ListMessages(ctx(t), b, store.ListInput{PageSize: 100})
	late := addInstruction(t, st, b, "late").Message.Message
	rest, err := st.ListMessages(ctx(t), b, store.ListInput{PageSize: 100, PageToken: first.NextPageToken})
	if err != nil || rest.Messages[len(rest.Messages)-1].Message.ID != late.ID || len(rest.Messages) != 22 {
		t.Errorf("continuation after a write: %d messages, %v", len(rest.Messages), err)
	}

	// A clear makes older tokens stale rather than silently skipping.
	if _, err := st.ClearMessages(ctx(t), b, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = st.ListMessages(ctx(t), b, store.ListInput{PageSize: 100, PageToken: first.NextPageToken})
	wantErr(t, err, store.ErrStalePageToken)

	// A token belongs to one incarnation of the branch (review MINOR 3): it does not continue the
	// branch created again under the same id.
	id := uuid.New()
	again := func() string {
		t.Helper()
		if _, err := st.CreateBranch(ctx(t), store.CreateBranchInput{ID: id}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			addInstruction(t, st, id, strconv.Itoa(i))
		}
		page, err := st.ListMessages(ctx(t), id, store.ListInput{PageSize: 1})
		if err != nil || page.NextPageToken == "" {
			t.Fatalf("first page: %+v, %v", page, err)
		}
		return page.NextPageToken
	}
	token := again()
	if _, err := st.DeleteBranch(ctx(t), id, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	again()
	_, err = st.ListMessages(ctx(t), id, store.ListInput{PageSize: 1, PageToken: token})
	wantErr(t, err, store.ErrStalePageToken)
}

// testListBranchesPaging: every branch appears once, in id order, across
// pages.
func testListBranchesPaging(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	created := map[uuid.UUID]bool{}
	for range 25 {
		created[newBranch(t, st)] = true
	}
	seen := map[uuid.UUID]bool{}
	token := ""
	var prev uuid.UUID
	for pages := 0; ; pages++ {
		page, err := st.ListBranches(ctx(t), 7, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page.Branches {
			if seen[b.ID] {
				t.Errorf("branch %s listed twice", b.ID)
			}
			if prev != (uuid.UUID{}) && b.ID.String() <= prev.String() {
				t.Errorf("branches out of order: %s after %s", b.ID, prev)
			}
			seen[b.ID], prev = true, b.ID
		}
		if page.NextPageToken == "" {
			break
		}
		token = page.NextPageToken
		if pages > 10 {
			t.Fatal("too many pages")
		}
	}
	if len(seen) != len(created) {
		t.Errorf("listed %d branches, created %d", len(seen), len(created))
	}
	_, err := st.ListBranches(ctx(t), -1, "")
	wantErr(t, err, envelope.ErrInvalid)
}
