// Memory for downloaded chunks (fetch/chunk_memory.h): the budget holds, kept buffers give way to
// new downloads oldest first, a download waits for room only while buffers are in use (and never
// when nothing else is), a stopping mount is not kept waiting, freed buffers are reused.
#include "fetch/chunk_memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace aprfs {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kMiB = 1 << 20;

ChunkMemory::Ref Filled(ChunkMemory::Reservation& reservation, size_t size, char value) {
  ChunkMemory::Ref buffer = reservation.Take(size);
  std::string bytes(size, value);
  EXPECT_EQ(buffer->Append(bytes.data(), bytes.size()), size);
  return buffer;
}

TEST(ChunkMemoryTest, BuffersArePageAlignedAndFilledUpToTheirCapacity) {
  ChunkMemory memory(16 * kMiB);
  auto reservation = memory.Reserve(kMiB + 100, {});
  ASSERT_TRUE(reservation);
  ChunkMemory::Ref buffer = reservation->Take(kMiB + 100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % 4096, 0u);
  EXPECT_GE(buffer->capacity(), kMiB + 100);
  std::string bytes(2 * kMiB, 'x');
  EXPECT_EQ(buffer->Append(bytes.data(), bytes.size()), buffer->capacity());
  EXPECT_EQ(buffer->size(), buffer->capacity());
  EXPECT_EQ(buffer->Append("y", 1), 0u);
}

TEST(ChunkMemoryTest, ReservationsAndBuffersAreCountedUntilTheyGo) {
  ChunkMemory memory(16 * kMiB);
  {
    auto reservation = memory.Reserve(4 * kMiB, {});
    ASSERT_TRUE(reservation);
    EXPECT_EQ(memory.used(), 4 * kMiB);
    ChunkMemory::Ref a = reservation->Take(kMiB);
    EXPECT_EQ(memory.used(), 4 * kMiB) << "taking from a reservation counts nothing twice";
    reservation.reset();
    EXPECT_EQ(memory.used(), kMiB) << "what was not taken went back";
  }
  EXPECT_EQ(memory.used(), 0u);
}

TEST(ChunkMemoryTest, KeptBuffersGiveWayToNewDownloadsOldestFirst) {
  ChunkMemory memory(4 * kMiB);
  std::weak_ptr<ChunkMemory::Buffer> kept[4];
  for (int i = 0; i < 4; ++i) {
    auto reservation = memory.Reserve(kMiB, {});
    ASSERT_TRUE(reservation);
    ChunkMemory::Ref buffer = Filled(*reservation, kMiB, char('a' + i));
    kept[i] = buffer;
    memory.Keep(std::move(buffer));
  }
  EXPECT_EQ(memory.kept(), 4 * kMiB);
  for (const auto& weak : kept) EXPECT_FALSE(weak.expired());
  // Room for two more: the two oldest go, the two newest stay.
  auto reservation = memory.Reserve(2 * kMiB, {});
  ASSERT_TRUE(reservation);
  EXPECT_TRUE(kept[0].expired());
  EXPECT_TRUE(kept[1].expired());
  ASSERT_FALSE(kept[2].expired());
  EXPECT_EQ(kept[2].lock()->data()[0], 'c');
  EXPECT_FALSE(kept[3].expired());
  EXPECT_EQ(memory.used(), 4 * kMiB);
}

TEST(ChunkMemoryTest, ForgetLetsAKeptBufferGoAtOnce) {
  ChunkMemory memory(8 * kMiB);
  auto reservation = memory.Reserve(kMiB, {});
  ASSERT_TRUE(reservation);
  ChunkMemory::Ref buffer = Filled(*reservation, kMiB, 'z');
  std::weak_ptr<ChunkMemory::Buffer> weak = buffer;
  const ChunkMemory::Buffer* address = buffer.get();
  memory.Keep(std::move(buffer));
  EXPECT_FALSE(weak.expired());
  memory.Forget(address);
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(memory.kept(), 0u);
  memory.Forget(address);  // no longer kept: nothing happens
}

TEST(ChunkMemoryTest, ADownloadWaitsForBuffersInUseToGo) {
  ChunkMemory memory(4 * kMiB);
  auto first = memory.Reserve(3 * kMiB, {});
  ASSERT_TRUE(first);
  std::atomic<bool> reserved{false};
  std::thread second([&] {
    auto reservation = memory.Reserve(2 * kMiB, {});
    EXPECT_TRUE(reservation);
    reserved = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(reserved) << "3 + 2 MiB fit in a budget of 4 MiB?";
  first.reset();
  second.join();
  EXPECT_TRUE(reserved);
  EXPECT_EQ(memory.used(), 0u);
}

TEST(ChunkMemoryTest, AReservationLargerThanTheBudgetGoesAheadAlone) {
  ChunkMemory memory(2 * kMiB);
  auto big = memory.Reserve(8 * kMiB, {});
  ASSERT_TRUE(big) << "would wait forever";
  EXPECT_EQ(memory.used(), 8 * kMiB);
}

TEST(ChunkMemoryTest, AStoppingMountIsNotKeptWaiting) {
  ChunkMemory memory(2 * kMiB);
  auto held = memory.Reserve(2 * kMiB, {});
  ASSERT_TRUE(held);
  std::atomic<bool> stopping{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    stopping = true;
  });
  auto waited = memory.Reserve(kMiB, [&] { return stopping.load(); });
  stopper.join();
  EXPECT_FALSE(waited);
  EXPECT_EQ(memory.used(), 2 * kMiB);
}

TEST(ChunkMemoryTest, FreedBuffersAreReusedWithinTheBudget) {
  ChunkMemory memory(4 * kMiB);
  const char* first = nullptr;
  {
    auto reservation = memory.Reserve(kMiB, {});
    ASSERT_TRUE(reservation);
    first = reservation->Take(kMiB)->data();  // freed at once: kept as spare
  }
  EXPECT_EQ(memory.spare(), kMiB);
  auto reservation = memory.Reserve(kMiB, {});
  ASSERT_TRUE(reservation);
  EXPECT_EQ(reservation->Take(kMiB)->data(), first);
  // Spares never take the process over its budget: what a reservation larger than the budget
  // used goes back to the system beyond it.
  reservation.reset();
  {
    auto big = memory.Reserve(8 * kMiB, {});
    ASSERT_TRUE(big);
    std::vector<ChunkMemory::Ref> buffers;
    for (int i = 0; i < 8; ++i) buffers.push_back(big->Take(kMiB));
    EXPECT_EQ(memory.spare(), 0u) << "the spare was taken first";
  }
  EXPECT_EQ(memory.used(), 0u);
  EXPECT_EQ(memory.spare(), 4 * kMiB);
}

TEST(ChunkMemoryTest, MemoryNobodyUsesGoesBackToTheSystemAfterItsIdleTime) {
  ChunkMemory memory(8 * kMiB, {std::chrono::milliseconds(300), std::chrono::milliseconds(200)});
  std::weak_ptr<ChunkMemory::Buffer> kept;
  {
    auto reservation = memory.Reserve(2 * kMiB, {});
    ASSERT_TRUE(reservation);
    ChunkMemory::Ref buffer = Filled(*reservation, kMiB, 'k');
    kept = buffer;
    memory.Keep(std::move(buffer));
    (void)reservation->Take(kMiB);  // freed at once: a spare
  }
  EXPECT_EQ(memory.kept(), kMiB);
  EXPECT_EQ(memory.spare(), kMiB);
  // Nobody calls in: the memory's own thread lets go (generous bound: only against a hang).
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while ((memory.kept() > 0 || memory.spare() > 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(kept.expired());
  EXPECT_EQ(memory.kept(), 0u);
  EXPECT_EQ(memory.spare(), 0u);
  EXPECT_EQ(memory.used(), 0u);
}

}  // namespace
}  // namespace aprfs
