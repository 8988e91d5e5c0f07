/* calls.c - Cortex-M4 firmware for Qiling's STM32F411 board (arm-none-eabi-gcc): recursion
 * and calls through a pointer, each function counting its entries in calls_made; it prints
 * the count and the result on USART2 ("calls 08 132") and spins.  Registers: STM32F411
 * reference manual RM0383 (USART2 at 0x40004400: SR +0, DR +4, CR1 +0xC; RCC_APB1ENR at
 * 0x40023840, USART2EN bit 17). */
#define USART2_DR (*(volatile unsigned *)0x40004404)
#define USART2_SR (*(volatile unsigned *)0x40004400)
#define USART2_CR1 (*(volatile unsigned *)0x4000440C)
#define RCC_APB1ENR (*(volatile unsigned *)0x40023840)
#define TXE (1u << 7)

volatile unsigned calls_made;

static void put(char c) { calls_made++; while (!(USART2_SR & TXE)) {} USART2_DR = c; }
static unsigned fact(unsigned n) { calls_made++; return n < 2 ? 1 : n * fact(n - 1); }
static unsigned twice(unsigned x) { calls_made++; return 2 * x; }
static unsigned apply(unsigned (*f)(unsigned), unsigned x) { calls_made++; return f(f(x)); }

void reset(void) {
    RCC_APB1ENR |= 1u << 17;   /* USART2EN */
    USART2_CR1 = (1u << 13) | (1u << 3);  /* UE, TE */
    unsigned r = fact(5) + apply(twice, 3);
    unsigned n = calls_made;   /* 8: fact 5, apply 1, twice 2 */
    put('c'); put('a'); put('l'); put('l'); put('s'); put(' ');
    put('0' + n / 10); put('0' + n % 10); put(' ');
    put('0' + r / 100); put('0' + r / 10 % 10); put('0' + r % 10); put('\n');
    for (;;) {}
}

/* the vector table (ARMv7-M ARM B1.5.3): initial SP, then the reset handler */
__attribute__((section(".vectors"), used))
static const void *vectors[] = { (void *)0x20020000, (void *)reset };
