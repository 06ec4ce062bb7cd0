// Package throttle decides whether work may proceed under a set of rate and
// concurrency limits. The Limiter interface has two backends with the same
// decisions: Redis (NewRedis), one state for any number of processes, and
// Local (NewLocal), in-process with bounded memory. Every Redis key and
// channel it writes is built in keys.go; Sluice's own records above the
// limiter, and the CLI's views of its keys, are in package control.
//
// # Algorithms
//
//   - GCRA: the token bucket as the generic cell rate algorithm. Rate units
//     per period, up to Burst at once; Burst 1 spaces units evenly (a leaky
//     bucket as a meter). Same decisions as go-redis/redis_rate. State: one
//     string (the theoretical arrival time); GCRA limits of one call that
//     share a key pack into one hash.
//   - FixedWindow: Rate.Limit units per window, windows aligned to multiples
//     of the period since the Unix epoch (a 1d window starts at 00:00 UTC).
//     Up to twice the limit can pass within one period that spans a
//     boundary; every aligned window holds at most the limit.
//   - SlidingWindowLog: exact; one sorted-set entry per admitted unit.
//   - SlidingWindowCounter: the previous window weighted by overlap plus the
//     current one; denied calls are not counted.
//   - MinInterval (cooldown): no two operations closer than Interval.
//   - Concurrency: at most Max leases held; Release frees one, and a lease
//     whose holder died expires after Limit.Lease and is reclaimed.
//   - Distinct: at most Rate.Limit distinct members per rolling window; a
//     member already counted passes free (WhatsApp messaging tiers).
//
// Windowed algorithms take windows of 1s, 30s, 1m, 5m, 1h or 1d; GCRA any
// period of 1ms or more.
//
// # Operations
//
// Consume(cost) takes from every limit of a call only if all of them have
// room; Check peeks; Status reports the state; Reset, ResetPrefix and List
// (cursor paging, SCAN on Redis) manage keys. Every decision carries
// allowed, remaining, reset and RetryAfter; its JSON form is
// {"allowed":false,"remaining":0,"reset":1704307200000,"retryAfter":23000}
// (reset in Unix ms, retryAfter in ms). Being over a limit is a Decision,
// not an error.
//
// On Redis, one Lua script (prelude.lua, one file per algorithm,
// consume.lua, embedded and joined) decides all limits of one scope in one
// EVALSHA. Calls spanning scopes are taken scope by scope in sorted order
// and refunded if a later scope blocks; see Redis. Runtime overrides
// (SetOverride) change limits for every process within a second; limit
// events go to a capped Redis Stream (Events). Errors the Redis limiter
// absorbs rather than fail a decision (an event it could not write,
// overrides it could not read) go to Options.Logger at WARN.
//
// # Keys
//
// A key is "{scope}:{resource}:{identifier}", e.g. "whatsapp:pair:+12025550123".
// In Redis it is stored under the prefix with the scope as the hash tag,
// "sluice:{whatsapp}:pair:+12025550123", so all keys of a scope live in one
// Redis Cluster slot. A scope may be finer than a channel
// ("whatsapp/106540352242922", one WhatsApp number's, rules.Template.SpreadBy)
// so that a channel's senders spread over a cluster's masters; Reserve then
// paces a send's GCRA limits in their scope's one script and decides its
// requests of another scope in a call before it. Every key has a TTL,
// refreshed on write, and disappears once its state equals "unused".
// Scopes starting with '_' are Sluice's own (events, overrides).
//
// # Time
//
// Redis TIME is the single clock shared by all workers; a test may inject
// Options.Clock instead. Times are kept in microseconds.
//
// # Reservation books
//
// Reserve, Plan and ReleasePlanned (reserve.lua and its parts) pace sends
// on their GCRA limits with two books per limit. The words below are the
// code's; times are microseconds since the Unix epoch, seconds are whole
// Unix seconds, counts are in cost units. A limit is fast when its paced
// interval T is under a second, slow otherwise (a pair, a 1/s sender).
//
//   - Firm book: the GCRA limit's own TAT in its state key (a string, or one
//     field per limit name of a hash when GCRA limits share the key), the
//     state Consume reads too, so firm reservations and Consume never
//     exceed the limit together. A firm reservation takes every limit of a
//     send for one exact instant, at most the hold ahead (Reservation.Firm,
//     Reservation.At).
//   - Plan book: the sends told to come back later, in two keys beside the
//     state key: "<key>|plan", a hash, and "<key>|backlog", a sorted set
//     ("sluice:{wa}:number:1|plan"; one hash tag, one Cluster slot).
//     A slow limit keeps its plan tail (field "t<name>": one interval after
//     its last planned send); a fast one a count per second ("<name>@<s>"),
//     a fill pointer to the first second that may have room ("f<name>") and
//     its tenants' records. <name> is the limit's field in a shared state
//     hash, else empty.
//   - Hold: ReserveOptions.Hold (DefaultHold, 2s): how far ahead a firm
//     reservation may be, the most a caller holds a send before its
//     instant. A send whose slot is further out is planned instead; one
//     that has a place (or is High) and that a slower limit holds back
//     within the hold keeps its place and asks again at that instant.
//   - Headroom: the fraction by which Reserve and Plan space a GCRA limit's
//     sends wider than the limit, T = period / limit / (1 - headroom):
//     80/s at 0.015 is paced at 78.8/s (ReserveOptions.Headroom,
//     DefaultHeadroom, at most MaxHeadroom).
//   - Place: a send's planned instant, kept under its TaskID in the backlog
//     of each of its GCRA limits (but a listless one, below), counted in that second of each fast
//     limit's plan and behind each slow limit's plan tail
//     (Reservation.Planned, Planned.At). Reserve with the TaskID takes the
//     firm slot for it; ReleasePlanned and SweepBacklogs give it up.
//   - Backlog: "<key>|backlog", a sorted set of task ID to planned instant,
//     one entry per place on that limit (Backlog, ListPlanned); its TTL
//     runs to an hour after its latest place. A limit paced slower than
//     the hold (a pair's 1 per 6 s) is listless: it keeps none for a send
//     that also has a fast limit (a number's 80/s), whose backlog holds the
//     same place; its plan tail (PlanTail) says whether a send is planned
//     there. A pause of that slow limit's scope then moves none of its
//     sends (DeferPlanned); they come back at their places and are planned
//     past it.
//   - Tenant turn: on a fast limit, backlogged tenants (ReserveOptions.Tenant,
//     "" included) share each second by Weight instead of first come, first
//     served: a send planned into a full future second takes a place from
//     the tenant most over its weighted share there, as long as its own
//     tenant stays at or under that share. Each second keeps a record of its
//     tenants (field "<name>@<s>#", JSON tenant to [weight, count, yields,
//     reservations]); a reservation is room held for a tenant with no task
//     in it, which moves on without a dequeue.
//   - Yield: what a tenant owes in a second where another tenant took a
//     place its task held: the first of its sends to come back in that
//     second takes no slot and is planned again on its tenant's first
//     reservation (one more dequeue), made for it in the first free room.
//   - Retake: a High Reserve with ReserveOptions.Retake, for a send that woke
//     up too late for the firm slot it took: on its fast limits it takes the
//     first free slot without being counted in the plan again; on its slow
//     ones, whose slot it keeps, the next send is spaced at least one
//     interval after now.
//   - Claim: not a throttle key. The producer (producer.ClaimKey, built by
//     control.ClaimKey: the string "<prefix>:_idem:<task ID>" holding
//     "<task type>|<token>", without a hash tag) claims a chosen task ID
//     across channels for producer.ClaimTTL while it enqueues, so a task of
//     another type with that ID is refused (tasks.ErrKeyInUse); the claim
//     is given back when the task is not enqueued and kept
//     (producer.DefaultClaimRetention) when it is. In plan_book.lua, plan_count's claim is a displaced send
//     taking its tenant's reservation.
package throttle
