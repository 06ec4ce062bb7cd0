package channels

// notRate are the throttles that say nothing about how fast the sends
// come: a daily cap, a quality or per-user hold, an upgrade under way.
// They pause their scope for the documented time; they do not lower a
// rate (docs/adaptive.md). Sources as in docs/providers.md.
var notRate = map[string]map[int]bool{
	ProviderWhatsApp: {
		131057: true, // throughput upgrade in progress, about a minute (Meta throughput docs)
		131048: true, // spam rate limit: the number's quality, not its speed (Meta error codes)
		131049: true, // per-user marketing limit (Meta error codes)
	},
	ProviderTwilio: {
		30023: true, // 10DLC daily cap (T-Mobile), resets at midnight Pacific
		63038: true, // account daily limit (Twilio error dictionary)
		14107: true, // over 30 replies to one pair in 30 s (Twilio error dictionary): replies, not sends
	},
}

// IsRate reports whether a throttle says the sends came too fast for the
// provider (WhatsApp 130429 and 131056, Twilio 20429, an HTTP 429 or 503),
// so that adaptive limits lower the rate of the scope's limits; false for
// other classes and for throttles that are caps or holds (WhatsApp 131048,
// Twilio 30023...).
func (e *Error) IsRate() bool {
	return e != nil && e.Class == Throttled && !notRate[e.Provider][e.Code]
}
