package client

// After starts a Watch after sequence seq, overriding the request's after_sequence: the retained
// events above seq come first, then the live ones. Without it (and without after_sequence in the
// request) a watch starts from now, and misses what was committed before the stream opened.
func After(seq uint64) WatchOption {
	return func(o *watchOptions) { o.after = &seq }
}

// FromStart starts a Watch from the branch's first event (After(0)): right after CreateBranch, it
// is the way to see every change, the BRANCH_CREATED event included.
func FromStart() WatchOption { return After(0) }
