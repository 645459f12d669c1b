package envelope

import (
	"errors"
	"fmt"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/envelope/pyfmt"
)

// ErrRenderTooLarge is wrapped by the error of a rendering that passed its
// cap (issue 11: a value nested ~1,000 deep renders to hundreds of times
// its size). It also wraps ErrRender, so such a message takes the
// render-failure path: no rendered text, the error instead.
var ErrRenderTooLarge = errors.New("rendering exceeds the render cap")

// RenderTooLargeError says which cap a rendering passed and how far it got.
type RenderTooLargeError struct {
	// Limit is the cap, in bytes of rendered text.
	Limit int
	// Bytes is how much had been rendered when the renderer stopped. The
	// minimal-YAML renderer, whose output can be hundreds of times its
	// input, stops before the write that would pass Limit, so Bytes is at
	// most Limit; the other renderings (at most a few times their input)
	// are measured whole, and Bytes is their size.
	Bytes int
}

func (e *RenderTooLargeError) Error() string {
	return fmt.Sprintf("%v: the rendered text does not fit in the cap of %d bytes (rendering stopped at %d bytes)", ErrRenderTooLarge, e.Limit, e.Bytes)
}

// Unwrap returns ErrRenderTooLarge and ErrRender.
func (e *RenderTooLargeError) Unwrap() []error { return []error{ErrRenderTooLarge, ErrRender} }

// cappedRenderer is the content whose rendering can amplify its size (the
// minimal-YAML ones, and generic content that may hold one): it takes the
// cap into the renderer, so that the work stops at it.
type cappedRenderer interface {
	renderWithin(limit int) (Rendered, error)
}

// RenderWithin is Render with a cap of limit bytes on the rendered text
// (the text, or the text part of a part list; image URLs are the stored
// image strings and are not counted). Past the cap the rendering stops and
// the error is a *RenderTooLargeError. limit <= 0 means no cap.
func (m *Message) RenderWithin(limit int) (Rendered, error) {
	if limit <= 0 {
		return m.Render()
	}
	var r Rendered
	var err error
	if c, ok := m.Content.(cappedRenderer); ok {
		r, err = c.renderWithin(limit)
	} else {
		r, err = m.Content.Render()
	}
	if err != nil {
		var tl *RenderTooLargeError
		if errors.As(err, &tl) {
			return Rendered{}, tl
		}
		return Rendered{}, renderError(err)
	}
	if n := r.TextBytes(); n > limit {
		return Rendered{}, &RenderTooLargeError{Limit: limit, Bytes: n}
	}
	return r, nil
}

// ChatMsgWithin is ChatMsg with RenderWithin's cap.
func (m *Message) ChatMsgWithin(limit int) (ChatMessage, error) {
	r, err := m.RenderWithin(limit)
	if err != nil {
		return ChatMessage{}, err
	}
	return ChatMessage{Role: m.Role(), Content: r}, nil
}

// TextBytes is the size of the rendered text: Text, or the text parts.
func (r Rendered) TextBytes() int {
	if r.Parts == nil {
		return len(r.Text)
	}
	n := 0
	for _, p := range r.Parts {
		if p.Type != "image_url" {
			n += len(p.Text)
		}
	}
	return n
}

// minimalYAMLText is trimPythonWhitespace(pyfmt.MinimalYAML(doc)) under a
// cap (limit <= 0: none). The cap is checked on the renderer's output,
// before the surrounding whitespace is stripped.
func minimalYAMLText(doc jsonv.Value, limit int) (string, error) {
	if limit <= 0 {
		return trimPythonWhitespace(pyfmt.MinimalYAML(doc)), nil
	}
	s, written, ok := pyfmt.MinimalYAMLWithin(doc, limit)
	if !ok {
		return "", &RenderTooLargeError{Limit: limit, Bytes: written}
	}
	return trimPythonWhitespace(s), nil
}
