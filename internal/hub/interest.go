package hub

// Interest is told when this hub starts and stops holding live state that other nodes'
// commits concern: the first subscription of a user and the end of the last one, a
// conversation's room made and closed, the first watch of a conversation and the end of the
// last. A node on a bus (chat's cluster) subscribes to the user's or conversation's subject
// for exactly as long, so that it receives only what it can deliver.
//
// Each method is called with the lock of the hub shard that holds the user or the
// conversation, so the calls for one user (or one conversation and one kind) come in order,
// on alternately true and false; they must return quickly and must not call the hub back.
type Interest interface {
	User(userID string, on bool)
	Room(convID string, on bool)
	ConvWatch(convID string, on bool)
}

// SetInterest makes h tell i of its users, rooms and conversation watches. Call it once,
// before h is used; without it (a single node) the hub tells no one.
func (h *Hub) SetInterest(i Interest) { h.interest = i }
