package protocol

// Limits of the wire contract.
const (
	MaxIDLen          = 64
	MaxConvIDLen      = 128
	MaxContentBytes   = 64 << 10 // content plus extra, as JSON
	MaxFrameBytes     = 1 << 20
	DefaultPageLimit  = 50
	MaxPageLimit      = 200
	DefaultSyncLimit  = 100
	MaxSyncLimit      = 1000
	DefaultRecent     = 20
	MaxRecent         = 100
	MaxLongPollSecond = 30
	// Pages of lists that grow with one user's memberships (conversations, snapshot,
	// members): limit= defaults to DefaultListLimit and is clamped to MaxListLimit.
	DefaultListLimit = 100
	MaxListLimit     = 500
)

// ValidUserID reports whether s is a well-formed user_id (also used for device_id):
// 1-64 characters of [A-Za-z0-9_.@-].
func ValidUserID(s string) bool { return validChars(s, MaxIDLen, true) }

// UserIDSet returns ids without repeats, in the order of first mention, reusing ids'
// array; bad is the index of the first id that is not a valid user_id (-1 when all are),
// and set is then nil.
func UserIDSet(ids []string) (set []string, bad int) {
	seen := make(map[string]bool, len(ids))
	set = ids[:0]
	for i, id := range ids {
		if !ValidUserID(id) {
			return nil, i
		}
		if !seen[id] {
			seen[id] = true
			set = append(set, id)
		}
	}
	return set, -1
}

// ValidDeviceID reports whether s is a well-formed device_id.
func ValidDeviceID(s string) bool { return validChars(s, MaxIDLen, true) }

// ValidClientMsgID reports whether s is a well-formed client_msg_id: 1-64 of [A-Za-z0-9_-].
func ValidClientMsgID(s string) bool { return validChars(s, MaxIDLen, false) }

// ValidConvID reports whether s has the form of a server-assigned conv_id: Parley assigns
// 1-128 characters of [A-Za-z0-9_-], so anything else is rejected before any lookup.
func ValidConvID(s string) bool { return validChars(s, MaxConvIDLen, false) }

func validChars(s string, max int, dotAt bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		case dotAt && (c == '.' || c == '@'):
		default:
			return false
		}
	}
	return true
}

// Limits of strict input (section 1 of the protocol): what every request body and frame must
// keep to beyond being JSON.
const (
	// MaxJSONDepth is the deepest nesting of arrays and objects a request may have, the
	// body object counting as 1: content can nest 31 levels, more than any message format
	// needs, and every reader of a message pays for its depth.
	MaxJSONDepth = 32
	// MaxSafeInteger (2^53-1) is the largest integer a request's fields may hold: the
	// largest that every JSON implementation, JavaScript's included, holds exactly.
	MaxSafeInteger = 1<<53 - 1
	// MaxRequestListLen is the most entries a list field of a request may have (members of
	// a new group; add and remove of a members change): a longer list is refused as soon as
	// its entry past the limit is read, so that the server's work never grows with it.
	MaxRequestListLen = 1000
	// MaxMentions is the most user ids a send's mentions may name (SendRequest's maxlen tag,
	// which the server's list rule reads, says the same).
	MaxMentions = 50
	// MaxContentType is the largest content_type a message may have (2^31-1): the range
	// that every storage engine keeps exactly, PostgreSQL's integer column included.
	MaxContentType = 1<<31 - 1
)
