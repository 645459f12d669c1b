// Package bufbytes counts the bytes a buffered channel holds, for the subscriptions that bound
// their buffers in bytes as well as in items: a history watch (internal/store) and an Exchange
// inbox subscription (internal/exchange). A channel does not say which of its items its reader
// has taken, but the one goroutine that sends knows how many are left in it (len), so it keeps
// the sizes of what it sent, oldest first, and drops from the front as many as the reader took.
package bufbytes
