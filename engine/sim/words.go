package sim

// functionWords are the short, frequent words of placeholder prose. The
// generator draws them more often than the content words.
var functionWords = [...]string{
	"the", "of", "and", "to", "a", "in", "is", "that", "for", "it",
	"as", "with", "on", "by", "this", "be", "are", "from", "at", "or",
	"an", "was", "which", "but", "not", "all", "can", "has", "more", "its",
	"into", "than", "each", "their", "over", "under", "between", "through", "when", "where",
	"while", "because", "so", "if", "then", "also", "only", "most", "some", "such",
}

// contentWords are nouns, verbs, adjectives and adverbs of placeholder
// prose.
var contentWords = [...]string{
	"time", "people", "way", "day", "world", "life", "hand", "part", "place", "case",
	"week", "system", "program", "question", "work", "number", "night", "point", "home", "water",
	"room", "area", "money", "story", "fact", "month", "lot", "right", "study", "book",
	"eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
	"friend", "power", "hour", "game", "line", "end", "member", "law", "car", "city",
	"community", "name", "team", "minute", "idea", "kid", "body", "information", "back", "parent",
	"face", "level", "office", "door", "health", "person", "art", "war", "history", "party",
	"result", "change", "morning", "reason", "research", "girl", "guy", "moment", "air", "teacher",
	"force", "education", "river", "garden", "market", "music", "paper", "window", "road", "field",
	"light", "sound", "voice", "stone", "tree", "forest", "mountain", "island", "ocean", "bridge",
	"machine", "engine", "signal", "pattern", "method", "model", "process", "structure", "theory", "value",
	"energy", "season", "weather", "letter", "language", "picture", "memory", "detail", "surface", "shape",
	"make", "take", "find", "give", "tell", "weave", "call", "try", "ask", "need",
	"feel", "become", "leave", "put", "mean", "keep", "let", "begin", "seem", "help",
	"show", "hear", "play", "run", "move", "live", "believe", "bring", "happen", "write",
	"provide", "sit", "stand", "lose", "pay", "meet", "include", "continue", "set", "learn",
	"lead", "understand", "watch", "follow", "stop", "create", "speak", "read", "allow", "add",
	"spend", "grow", "open", "walk", "win", "offer", "remember", "consider", "appear", "buy",
	"wait", "serve", "send", "expect", "build", "stay", "fall", "reach", "remain", "suggest",
	"raise", "pass", "sell", "require", "report", "decide", "pull", "carry", "explain", "hope",
	"develop", "drive", "return", "measure", "describe", "compare", "gather", "shift", "settle", "travel",
	"good", "new", "first", "last", "long", "great", "little", "own", "other", "old",
	"big", "high", "different", "small", "large", "next", "early", "young", "important", "few",
	"public", "bad", "same", "able", "quiet", "simple", "clear", "recent", "certain", "honest",
	"whole", "free", "real", "full", "special", "easy", "strong", "possible", "ready", "local",
	"bright", "careful", "common", "distant", "gentle", "heavy", "hidden", "narrow", "patient", "quick",
	"rare", "steady", "warm", "wide", "wild", "calm", "dark", "deep", "fresh", "golden",
	"often", "always", "never", "sometimes", "usually", "already", "almost", "again", "soon", "still",
	"together", "perhaps", "rather", "quite", "nearly", "slowly", "quickly", "simply", "finally", "later",
	"north", "south", "summer", "winter", "autumn", "spring", "village", "harbor", "valley", "meadow",
	"lantern", "journey", "promise", "answer", "balance", "chapter", "courage", "distance", "evening", "feature",
	"harvest", "horizon", "instance", "kitchen", "library", "message", "network", "option", "outcome", "planet",
	"practice", "quality", "record", "region", "sample", "schedule", "section", "session", "shadow", "silver",
	"station", "strategy", "student", "subject", "support", "table", "task", "texture", "thread", "token",
	"traffic", "update", "version", "vision", "volume", "wonder", "yard", "zone", "anchor", "border",
	"branch", "canvas", "circle", "cloud", "corner", "crystal", "current", "desert", "engineer", "factory",
}
