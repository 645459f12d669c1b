package client

import (
	"context"
	"iter"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Messages yields every message of a listing, page after page, following next_page_token until
// it is empty (README "History API": paging). req selects the branch, the view or the selected
// progression, the direction and the page size; its page_token is where the listing starts. req is
// not modified. The first error ends the sequence: it is yielded with a nil message.
func (c *Client) Messages(ctx context.Context, req *historyv1.ListMessagesRequest) iter.Seq2[*historyv1.Message, error] {
	return func(yield func(*historyv1.Message, error) bool) {
		req := proto.CloneOf(req)
		for {
			page, err := c.History.ListMessages(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, m := range page.GetMessages() {
				if !yield(m, nil) {
					return
				}
			}
			if page.GetNextPageToken() == "" {
				return
			}
			req.PageToken = page.GetNextPageToken()
		}
	}
}
