// RESP2/RESP3 (the Redis protocol), as far as pt2cached's front door needs it:
// parsing client commands (multibulk and inline) and encoding replies. Pure
// functions over bytes. Limits and error wording follow Redis, so clients and
// tools see what they would see from redis-server. See docs/torch.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace pt2cache::proto::resp {

inline constexpr std::size_t k_max_multibulk = 1024 * 1024;
inline constexpr std::size_t k_max_inline = 64 * 1024;
// Redis's default proto-max-bulk-len.
inline constexpr std::uint64_t k_max_bulk = 512ull << 20;
// Redis's limits for a client that must authenticate and has not: a command
// of more arguments, or an argument longer, is a protocol error, so that a
// stranger cannot make the server buffer a large request.
inline constexpr std::size_t k_max_unauthenticated_multibulk = 10;
inline constexpr std::uint64_t k_max_unauthenticated_bulk = 16 * 1024;

struct Limits {
    // A longer bulk string is a protocol error ("invalid bulk length").
    std::uint64_t max_bulk = k_max_bulk;
    // A longer bulk string (within max_bulk) is reported as TooLarge as soon
    // as its length is read, before its bytes arrive.
    std::uint64_t max_value = k_max_bulk;
    // The client must authenticate and has not: Redis's lower limits
    // (k_max_unauthenticated_multibulk, k_max_unauthenticated_bulk) apply.
    bool unauthenticated = false;
};

// One command; the arguments point into the parsed buffer.
struct Command {
    std::vector<std::string_view> args;
    std::size_t consumed = 0;
};

struct NeedMore {
    std::size_t bytes = 1; // at least this many more bytes
};

// A protocol error: the reply is "-ERR Protocol error: <message>" and the
// connection closes.
struct ProtocolError {
    std::string message;
};

// A well-formed bulk string longer than Limits::max_value: argument `index`
// of the command announces `length` bytes. The front door closes the
// connection without a reply (an -ERR would fail an Inductor compile).
struct TooLarge {
    std::size_t index = 0;
    std::uint64_t length = 0;
};

using ParseResult = std::variant<NeedMore, Command, ProtocolError, TooLarge>;

// Where a multibulk command that has arrived in part was left, so that the
// next parse of it resumes there: a command of a million arguments that
// arrives in many pieces is then read once, not once per piece (a 500 MB
// command of 500-byte arguments took 14 s of CPU, starting over each time).
// Offsets count from the start of `bytes`, which must begin with the same
// command at each call; any outcome but NeedMore resets it.
struct Resume {
    std::int64_t count = 0; // the command's argument count; 0: nothing to resume
    std::int64_t next = 0;  // arguments [0, next) have arrived whole and are valid
    std::size_t pos = 0;    // where argument `next` begins
};

// Parses one command from the front of `bytes`. Empty inline lines are
// consumed and yield a Command with no arguments. A Command's `args` are
// built in `reuse` (cleared first), so that a caller handing back the
// previous command's vector parses without allocating. With `resume`, a
// multibulk command that needs more bytes records where it was left.
ParseResult parse_command(std::span<const std::byte> bytes, const Limits& limits,
                          std::vector<std::string_view> reuse = {}, Resume* resume = nullptr);

// Reply encoding. `version` is 2 or 3 (after HELLO 3); where RESP3 has its
// own type (null, map, double, ...) the RESP2 fallback is used for 2.
class Writer {
public:
    Writer(std::vector<std::byte>& out, int version)
        : m_out(out)
        , m_version(version) {}

    // Line replies: a CR or LF in `text` is written as a space.
    Writer& simple(std::string_view text);   // +text
    Writer& error(std::string_view text);    // -text (text includes the code)
    Writer& integer(std::int64_t value);     // :n
    Writer& bulk(std::string_view bytes);    // $n bytes
    Writer& bulk_header(std::size_t length); // $n, the caller sends bytes + CRLF
    Writer& crlf();
    Writer& null();                          // $-1 or _
    Writer& null_array();                    // *-1 or _
    Writer& array(std::size_t count);        // *n
    Writer& map(std::size_t pairs);          // %n, or *2n for RESP2
    Writer& verbatim(std::string_view text); // =n txt:..., or bulk for RESP2

private:
    Writer& line(char type, std::string_view text);
    // `type`, the decimal `value`, CRLF: one append, no formatting library.
    Writer& number_line(char type, std::int64_t value);
    std::vector<std::byte>& m_out;
    int m_version;
};

// "unknown command 'foo', with args beginning with: 'a' 'b' " (Redis 7 wording).
std::string unknown_command_message(std::span<const std::string_view> args);

} // namespace pt2cache::proto::resp
