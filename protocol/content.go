package protocol

import "encoding/json"

// Content types (Message.ContentType, section 6.1). The server checks only that a
// content_type is at least 1 and that content is JSON; what content holds is a convention
// between clients, stated here once so that every client renders the others' messages.
// Values 6-99 are reserved; from ContentCustom up they are the application's to define.
const (
	ContentText   = 1 // content is a TextContent: {"text": "..."}
	ContentImage  = 2
	ContentFile   = 3
	ContentAudio  = 4
	ContentVideo  = 5
	ContentCustom = 100
)

// TextContent is the content of a text message (content_type ContentText): a JSON object
// with the text in its "text" field. Other fields may be present and are ignored by clients
// that do not know them.
type TextContent struct {
	Text string `json:"text"`
}

// Text returns the text of a text message. ok is false for other content types, for a
// recalled message (its content is null) and for content that is not a TextContent.
func (m Message) Text() (text string, ok bool) {
	if m.ContentType != ContentText || m.Recalled {
		return "", false
	}
	var c *TextContent
	if json.Unmarshal(m.Content, &c) != nil || c == nil {
		return "", false
	}
	return c.Text, true
}
