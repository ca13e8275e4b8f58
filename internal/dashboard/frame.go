package dashboard

import (
	"bytes"
	"strconv"
)

// APIVersion is the "api" field of every answer; it changes only when a
// field is renamed or removed.
const APIVersion = 1

// frameSlack is room enough for an event's head, the envelope and its tail,
// so that framing a document allocates once.
const frameSlack = 160

// The envelope: every answer, JSON or SSE, is an object that starts with
// "api", "boot" and "seq". A document that is an object gets these spliced
// in before its own fields (no copy of the document for api/NAME); anything
// else becomes {"api":1,"boot":…,"seq":…,"data":DOC}.

// splice cuts doc into the separator after the envelope's head, the rest of
// the document, and a tail that closes the object.
func splice(doc []byte) (sep string, rest []byte, tail string) {
	t := bytes.TrimLeft(doc, " \t\r\n")
	if len(t) == 0 {
		return `,"data":null}`, nil, ""
	}
	if t[0] != '{' {
		return `,"data":`, t, "}"
	}
	inner := t[1:]
	if in := bytes.TrimLeft(inner, " \t\r\n"); len(in) > 0 && in[0] == '}' {
		return "", inner, ""
	}
	return ",", inner, ""
}

func appendHead(b []byte, boot string, seq uint64) []byte {
	b = append(b, `{"api":`...)
	b = strconv.AppendInt(b, APIVersion, 10)
	b = append(b, `,"boot":"`...)
	b = append(b, boot...) // hex: nothing to escape
	b = append(b, `","seq":`...)
	return strconv.AppendUint(b, seq, 10)
}

// appendEnvelope appends doc with the envelope's fields.
func appendEnvelope(b []byte, boot string, seq uint64, doc []byte) []byte {
	sep, rest, tail := splice(doc)
	b = appendHead(b, boot, seq)
	b = append(b, sep...)
	b = append(b, rest...)
	return append(b, tail...)
}

// envelopeParts returns doc with the envelope's fields as three pieces to
// write in turn, without copying doc.
func envelopeParts(boot string, seq uint64, doc []byte) (head, rest []byte, tail string) {
	sep, rest, tail := splice(doc)
	head = append(appendHead(make([]byte, 0, 64), boot, seq), sep...)
	return head, rest, tail
}

// appendData appends doc, enveloped, as one SSE "data:" line. A raw line
// break in valid JSON can only be whitespace between tokens (inside strings
// it is escaped), so it becomes a space and the data stays one line.
func appendData(b []byte, boot string, seq uint64, doc []byte) []byte {
	b = append(b, "data: "...)
	start := len(b)
	b = appendEnvelope(b, boot, seq, doc)
	for _, c := range []byte{'\n', '\r'} { // IndexByte is vectorized; IndexAny is not
		for i := start; ; {
			j := bytes.IndexByte(b[i:], c)
			if j < 0 {
				break
			}
			b[i+j] = ' '
			i += j + 1
		}
	}
	return append(b, '\n')
}

// appendEvent appends a whole SSE message: event, id, data, blank line.
func appendEvent(b []byte, event, boot string, seq uint64, doc []byte) []byte {
	b = appendEventHead(b, event, boot, seq)
	b = appendData(b, boot, seq, doc)
	return append(b, '\n')
}

func appendEventHead(b []byte, event, boot string, seq uint64) []byte {
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\nid: "...)
	b = append(b, eventID(boot, seq)...)
	return append(b, '\n')
}
