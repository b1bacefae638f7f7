// SPDX-License-Identifier: MIT
// Fuzz target: the RESP request parser (proto/resp.*: parse_command).
// Invariants: a command consumes no more than it was given and its arguments
// lie inside what it consumed; re-encoded as a multibulk it parses to the
// same arguments and consumes exactly that encoding; the outcome does not
// depend on how the bytes were split (every prefix is "need more" or the
// same outcome, and "need more" never asks past the end of the command), nor
// on whether each parse resumes where the one before was left (Resume); a
// small max_value turns exactly the first oversized argument into TooLarge.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "proto/resp.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

using namespace pt2cache::proto::resp;
using Bytes = std::span<const std::byte>;

bool same_outcome(const ParseResult& a, const ParseResult& b) {
    if (a.index() != b.index()) {
        return false;
    }
    if (const auto* command = std::get_if<Command>(&a)) {
        const auto& other = std::get<Command>(b);
        return command->consumed == other.consumed && command->args == other.args;
    }
    // Protocol errors may be worded differently when seen early (a length
    // line too long to wait for, against one that does not parse): either
    // way the connection is refused.
    if (const auto* large = std::get_if<TooLarge>(&a)) {
        const auto& other = std::get<TooLarge>(b);
        return large->index == other.index && large->length == other.length;
    }
    return true;
}

void check_command(Bytes input, const Command& command, const Limits& limits) {
    FUZZ_CHECK(command.consumed >= 1 && command.consumed <= input.size());
    const auto* begin = reinterpret_cast<const char*>(input.data());
    for (const auto arg : command.args) {
        FUZZ_CHECK(arg.data() >= begin && arg.data() + arg.size() <= begin + command.consumed);
        FUZZ_CHECK(arg.size() <= limits.max_value);
    }

    // The same arguments as a multibulk, as redis-py would send them.
    std::vector<std::byte> encoded;
    Writer writer(encoded, 2);
    writer.array(command.args.size());
    for (const auto arg : command.args) {
        writer.bulk(arg);
    }
    const auto again = parse_command(encoded, limits);
    FUZZ_CHECK(std::holds_alternative<Command>(again));
    const auto& reparsed = std::get<Command>(again);
    FUZZ_CHECK(reparsed.consumed == encoded.size());
    FUZZ_CHECK(reparsed.args == command.args);
}

// Every prefix of `input` is "need more" or already the whole outcome.
void check_prefixes(Bytes input, const ParseResult& whole, const Limits& limits) {
    const std::size_t end =
        std::holds_alternative<Command>(whole) ? std::get<Command>(whole).consumed : input.size();
    std::vector<std::size_t> cuts;
    if (end <= 48) {
        for (std::size_t cut = 0; cut < end; ++cut) {
            cuts.push_back(cut);
        }
    } else {
        for (std::size_t i = 0; i < 24; ++i) {
            cuts.push_back(end * i / 24);
        }
        cuts.push_back(end - 1);
    }
    for (const auto cut : cuts) {
        const auto partial = parse_command(input.first(cut), limits);
        if (const auto* more = std::get_if<NeedMore>(&partial)) {
            FUZZ_CHECK(more->bytes >= 1);
            if (const auto* command = std::get_if<Command>(&whole)) {
                FUZZ_CHECK(cut + more->bytes <= command->consumed);
            }
            continue;
        }
        // An outcome seen early is the outcome of the whole input.
        FUZZ_CHECK(!std::holds_alternative<Command>(partial));
        FUZZ_CHECK(same_outcome(partial, whole));
    }
    // The same prefixes in turn, each parse resuming where the last one was
    // left, end in the same outcome as one parse of the whole.
    Resume resume;
    for (const auto cut : cuts) {
        const auto partial = parse_command(input.first(cut), limits, {}, &resume);
        if (!std::holds_alternative<NeedMore>(partial)) {
            FUZZ_CHECK(same_outcome(partial, whole));
            return;
        }
        FUZZ_CHECK(resume.pos <= cut);
    }
    FUZZ_CHECK(same_outcome(parse_command(input, limits, {}, &resume), whole));
    FUZZ_CHECK(resume.count == 0 || std::holds_alternative<NeedMore>(whole));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const Bytes input(reinterpret_cast<const std::byte*>(data), size);
    const Limits limits;
    const auto whole = parse_command(input, limits);
    check_prefixes(input, whole, limits);
    if (const auto* command = std::get_if<Command>(&whole)) {
        check_command(input, *command, limits);
    }

    // With a small max_value the first longer argument is TooLarge, as soon
    // as its length is read; everything else is unchanged.
    Limits small;
    small.max_value = 8;
    const auto limited = parse_command(input, small);
    const auto* command = std::get_if<Command>(&whole);
    if (command && input[0] != std::byte{'*'}) {
        FUZZ_CHECK(same_outcome(limited, whole)); // inline commands have no bulk lengths
    } else if (command) {
        const auto large = std::find_if(command->args.begin(), command->args.end(),
                                        [&](std::string_view arg) { return arg.size() > 8; });
        if (large == command->args.end()) {
            FUZZ_CHECK(same_outcome(limited, whole));
        } else {
            FUZZ_CHECK(std::holds_alternative<TooLarge>(limited));
            const auto& too_large = std::get<TooLarge>(limited);
            FUZZ_CHECK(too_large.index == std::size_t(large - command->args.begin()));
            FUZZ_CHECK(too_large.length == large->size());
        }
    } else if (std::holds_alternative<ProtocolError>(whole)) {
        FUZZ_CHECK(std::holds_alternative<ProtocolError>(limited) ||
                   std::holds_alternative<TooLarge>(limited));
    }
    if (std::holds_alternative<Command>(whole)) {
        check_prefixes(input, limited, small);
    }

    // Before AUTH: a multibulk command of more than 10 arguments, or with
    // one over 16 KiB, is a protocol error; a command within them parses
    // as before.
    Limits stranger;
    stranger.unauthenticated = true;
    const auto guarded = parse_command(input, stranger);
    if (command && input[0] == std::byte{'*'}) {
        const bool within =
            command->args.size() <= k_max_unauthenticated_multibulk &&
            std::all_of(command->args.begin(), command->args.end(), [](std::string_view arg) {
                return arg.size() <= k_max_unauthenticated_bulk;
            });
        FUZZ_CHECK(within ? same_outcome(guarded, whole)
                          : std::holds_alternative<ProtocolError>(guarded));
    } else if (command) {
        FUZZ_CHECK(same_outcome(guarded, whole));
    }
    return 0;
}
