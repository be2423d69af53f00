"""A deterministic, web-like demo corpus, generated in code (no network, no data files).

``luminamoon demo`` writes it and runs the pipeline on it.  Every document
carries its ground truth in a ``kind`` field, so the summary can show what the
pipeline did to each kind of page:

* ``article`` — English prose pages (titles, paragraphs, sometimes nav/footer
  lines and a contact paragraph holding personal data).
* ``article_pii`` — articles whose body holds personal data of every type the
  masker knows: e-mail addresses, public IPv4/IPv6 addresses, international and
  North-American phone numbers, Luhn-valid card numbers, mod-97-valid IBANs.
* ``exact_duplicate`` — an earlier page, byte for byte, under another URL.
* ``near_duplicate`` — an earlier page with whitespace noise (trailing spaces,
  double spaces, CRLF, no-break spaces, extra blank lines): identical once
  cleaned, so deduplication of the cleaned text removes it.
* ``syndicated`` — an earlier article with another site's navigation lines,
  which the C4 line rules strip, so it too ends up a duplicate.
* ``multilingual`` — pages in German, French, Spanish, Russian, Chinese,
  Japanese, Arabic and Greek (the English-centred Gopher/C4 rules drop most).
* ``broken_encoding`` — English pages with control characters, ANSI escapes,
  Unicode spaces, mojibake and lone surrogates (``\\udcXX`` escapes in the JSON:
  the JSON form of undecodable bytes); the cleaner repairs or removes them.
* ``boilerplate`` — cookie banners, menus, footers, lorem ipsum templates and
  pages of leaked JavaScript/CSS.
* ``spam`` — keyword stuffing, repeated lines, hashtag walls.
* ``short`` — error pages, placeholders, empty and whitespace-only pages.

Output is a function of ``(size, seed)`` only: the same arguments give the same
bytes on every machine and Python >= 3.10 (``random.Random`` with an int seed is
stable across versions for the calls used here).

Example:
    >>> from luminamoon.cli.demo_corpus import generate
    >>> info = generate("demo/corpus", size_mb=1, seed=7)      # doctest: +SKIP
    >>> info["documents"], info["paths"][:1]                   # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
import os
import random
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .._durable import atomic_replace

__all__ = ["generate", "iter_documents", "KINDS", "luhn_check_digit", "iban_check_digits"]

# Share of each kind among generated pages (duplicates need earlier pages, so
# they start after a warm-up).
KINDS: Dict[str, float] = {
    "article": 0.40, "article_pii": 0.08, "exact_duplicate": 0.08, "near_duplicate": 0.05,
    "syndicated": 0.03, "multilingual": 0.09, "broken_encoding": 0.04, "boilerplate": 0.09,
    "spam": 0.07, "short": 0.07,
}

# --------------------------------------------------------------------- words
TOPICS: Dict[str, Dict[str, List[str]]] = {
    "gardening": {
        "noun": "tomato seedling compost trellis greenhouse orchard hedge meadow shovel watering-can beetle "
                "mulch cutting root bulb raspberry cabbage pumpkin sunflower allotment soil drainage fern "
                "lavender rosemary wheelbarrow pergola apple-tree shed rainwater hive".split(),
        "adj": "sunny shady fertile sandy frost-hardy fragrant overgrown organic compact leafy ripe sturdy "
               "drought-tolerant dense neglected terraced damp productive woody vigorous".split(),
        "verb": "planted pruned watered harvested mulched repotted fertilised transplanted grafted sowed "
                "weeded staked divided composted protected".split(),
    },
    "cooking": {
        "noun": "risotto sourdough skillet broth marinade pastry dumpling casserole spice chutney oven "
                "saucepan recipe ferment crust glaze noodle lentil stew brine butter garlic shallot "
                "cardamom saffron pancake omelette granola dough vinaigrette".split(),
        "adj": "crispy tender smoky tangy savoury golden creamy rustic hearty aromatic spicy silky "
               "caramelised zesty seasonal homemade rich delicate buttery fluffy".split(),
        "verb": "simmered roasted kneaded whisked seasoned braised toasted folded proofed glazed "
                "grilled reduced stirred chopped marinated".split(),
    },
    "travel": {
        "noun": "harbour railway hostel itinerary ferry glacier canyon boulevard market lighthouse "
                "monastery village passport airport trail summit bridge cathedral lagoon vineyard "
                "fortress island valley museum plaza coastline tram bazaar oasis station".split(),
        "adj": "remote bustling quiet scenic historic crowded windswept medieval coastal colourful "
               "affordable hidden narrow ancient vibrant peaceful rugged charming snowy sleepy".split(),
        "verb": "visited explored crossed photographed booked wandered hiked sailed reached admired "
                "discovered toured climbed missed recommended".split(),
    },
    "technology": {
        "noun": "compiler database server kernel router laptop firmware cache protocol browser "
                "terminal container cluster dashboard keyboard sensor battery processor scheduler "
                "library debugger network backup repository patch interface storage tablet".split(),
        "adj": "reliable lightweight scalable outdated encrypted portable modular responsive robust "
               "experimental open-source legacy efficient noisy wireless configurable minimal".split(),
        "verb": "compiled deployed configured upgraded benchmarked patched restarted migrated "
                "profiled tested rebuilt installed monitored replaced optimised".split(),
    },
    "history": {
        "noun": "treaty empire manuscript dynasty harbour guild parliament cathedral rebellion "
                "merchant archive chronicle province fortress census monarch colony canal printing-press "
                "charter abbey frontier legion senate tapestry coin scribe fleet".split(),
        "adj": "medieval ancient colonial forgotten royal rebellious wealthy contested powerful "
               "devout fragile neglected prosperous provincial imperial remarkable".split(),
        "verb": "founded signed conquered recorded rebuilt abandoned governed besieged traded "
                "defended copied translated excavated restored inherited".split(),
    },
    "sports": {
        "noun": "striker goalkeeper marathon stadium referee tournament league coach relay "
                "racquet helmet bicycle sprint season trophy pitch locker-room midfielder rink "
                "penalty finish-line training-camp pool regatta derby".split(),
        "adj": "undefeated exhausted determined talented young experienced injured disciplined "
               "ambitious agile legendary hopeful nervous confident tireless".split(),
        "verb": "scored defended trained won lost qualified coached sprinted celebrated "
                "tackled improved retired signed challenged equalised".split(),
    },
    "finance": {
        "noun": "budget mortgage pension invoice dividend portfolio savings-account loan tax-return "
                "spreadsheet receipt salary bond insurer broker deposit inflation ledger credit "
                "subscription expense refund auditor wallet".split(),
        "adj": "monthly fixed variable overdue prudent generous modest volatile cautious annual "
               "quarterly diversified secure profitable costly".split(),
        "verb": "paid saved invested borrowed reviewed balanced audited cancelled negotiated "
                "transferred refinanced calculated claimed approved tracked".split(),
    },
    "health": {
        "noun": "clinic vaccine nurse diet symptom therapy prescription posture workout sleep "
                "hospital pharmacist allergy muscle vitamin stretch routine appointment "
                "physiotherapist heartbeat hydration blood-test recovery".split(),
        "adj": "balanced gentle chronic mild regular healthy restful painful seasonal preventive "
               "intensive steady careful moderate".split(),
        "verb": "recommended prescribed examined treated monitored diagnosed reduced prevented "
                "improved measured recovered scheduled stretched".split(),
    },
}
ADVERBS = ("carefully quickly slowly rarely happily quietly surprisingly eventually regularly honestly "
           "barely deliberately patiently gradually suddenly fortunately").split()
PREPS = "near beside behind across around under beyond inside along through".split()
NAMES = ("Amelia Okafor|Lukas Brandt|Sofia Ricci|Mateo Alvarez|Hannah Lindqvist|Ravi Menon|Chloé Dubois|"
         "Kenji Watanabe|Fatima Haddad|Olivia Novak|Jonas Weber|Aisha Bello|Noah Fischer|Mei Chen|"
         "Ingrid Haugen|Tomás Ferreira|Zoë Martin|Björn Ekström|Priya Nair|Ewa Kowalska").split("|")
PLACES = ("Zürich|Kraków|São Paulo|Montréal|Reykjavík|Málaga|Kyoto|Tromsø|Marrakesh|Córdoba|Ljubljana|"
          "Dubrovnik|Ho Chi Minh City|Valparaíso|Tbilisi|Porto|Galway|Cusco|Nuremberg|Bergen").split("|")
CONNECT = ("However, |Meanwhile, |In the end, |Last spring, |According to the locals, |To be fair, |"
           "Surprisingly, |Years later, |For most visitors, |As expected, |On weekdays, |").split("|")
SITES = ("dailyharbour.net greenthumb-journal.org thekitchenlog.com wanderline.travel bytesandbolts.io "
         "oldchronicles.org matchday-report.com moneywise-blog.net wellnessweekly.org cityherald.co.uk "
         "morningpost-online.com hobbyforum.de").split()

# ------------------------------------------------------- other languages
FOREIGN: Dict[str, Tuple[str, List[str]]] = {
    "de": (" ", ["Der Hafen von {p} ist im Sommer voller Touristen und Fischer.",
                 "Wir haben das kleine Restaurant am Marktplatz wieder besucht.",
                 "Die Preise für Wohnungen sind in den letzten Jahren stark gestiegen.",
                 "Am Wochenende fährt die Straßenbahn nur alle zwanzig Minuten.",
                 "Meine Großmutter backt jeden Sonntag einen Apfelkuchen mit Zimt.",
                 "Die Bürgerversammlung diskutierte lange über den neuen Radweg.",
                 "Im Museum hängen Gemälde aus dem neunzehnten Jahrhundert.",
                 "Nach dem Regen roch der Wald nach Moos und feuchter Erde.",
                 "Viele Studierende arbeiten neben dem Studium in Cafés.",
                 "Der Zug nach {p} hatte wieder einmal Verspätung."]),
    "fr": (" ", ["Le marché de {p} ouvre tôt le samedi matin.",
                 "Nous avons dégusté une tarte aux pommes encore tiède.",
                 "La bibliothèque municipale prête aussi des instruments de musique.",
                 "Les élèves ont présenté leur projet devant toute l'école.",
                 "Il pleuvait depuis trois jours quand le festival a commencé.",
                 "Le vieux pont de pierre a été restauré l'année dernière.",
                 "Ma voisine cultive des tomates sur son balcon étroit.",
                 "Les prix de l'énergie ont beaucoup augmenté cet hiver.",
                 "On entend les cloches de l'église depuis la place principale.",
                 "Le train pour {p} part du quai numéro quatre."]),
    "es": (" ", ["El mercado de {p} está lleno de frutas y especias.",
                 "Cada verano visitamos a nuestros abuelos en el pueblo.",
                 "La biblioteca abre hasta las nueve de la noche.",
                 "El equipo local ganó el partido en el último minuto.",
                 "Mi hermana aprendió a tocar la guitarra durante la pandemia.",
                 "Las calles del centro histórico son estrechas y empinadas.",
                 "El precio del alquiler sigue subiendo en las grandes ciudades.",
                 "Preparamos una paella enorme para toda la familia.",
                 "Después de la tormenta, el cielo quedó completamente despejado.",
                 "El autobús a {p} sale cada media hora."]),
    "ru": (" ", ["Летом в {p} приезжает много туристов.",
                 "Мы долго гуляли по старому парку у реки.",
                 "Бабушка каждое воскресенье печёт пироги с капустой.",
                 "В библиотеке открыли новый читальный зал.",
                 "Поезд опоздал почти на два часа из-за снега.",
                 "Студенты готовятся к экзаменам всю ночь.",
                 "На рынке продают свежие ягоды и мёд.",
                 "Вечером в городе зажглись праздничные огни."]),
    "zh": ("", ["今天早上我们去了{p}的老市场。", "这家小饭馆的饺子非常好吃。", "图书馆周末开放到晚上九点。",
                "他每天骑自行车去上班。", "春天的时候公园里开满了樱花。", "这座桥已经有三百多年的历史了。",
                "我们在山上看到了美丽的日出。", "孩子们在操场上踢足球。"]),
    "ja": ("", ["昨日は{p}の古い寺を訪れました。", "駅前の喫茶店はいつも混んでいます。", "週末に友達と山へハイキングに行きました。",
                "この町の図書館はとても静かです。", "祖母は毎朝早く庭の花に水をやります。", "新しいパン屋さんが商店街にできました。",
                "雨の日は家で本を読むのが好きです。", "電車が少し遅れて到着しました。"]),
    "ar": (" ", ["زرنا السوق القديم في {p} يوم الجمعة.", "المكتبة العامة مفتوحة حتى التاسعة مساء.",
                 "يحب الأطفال اللعب في الحديقة بعد المدرسة.", "ارتفعت أسعار الخضار هذا الشهر.",
                 "تعلمت أختي الطبخ من جدتي.", "كان الطقس جميلا على شاطئ البحر."]),
    "el": (" ", ["Το λιμάνι της {p} είναι γεμάτο βάρκες το καλοκαίρι.", "Η γιαγιά μου φτιάχνει την καλύτερη σπανακόπιτα.",
                 "Το μουσείο ανοίγει στις εννέα το πρωί.", "Περπατήσαμε στα στενά δρομάκια της παλιάς πόλης.",
                 "Ο καιρός άλλαξε ξαφνικά το απόγευμα.", "Τα παιδιά έπαιζαν ποδόσφαιρο στην πλατεία."]),
}

# ---------------------------------------------------------- boilerplate / spam
NAV = ["Home | News | Sport | Business | Contact", "Menu", "Skip to main content", "Subscribe",
       "Log in", "Search", "Share on Facebook", "Tweet", "Related posts", "Read more",
       "Previous article Next article", "Follow us on Instagram", "Categories: Uncategorized"]
FOOTER = ["© {y} {site}. All rights reserved.", "Privacy Policy | Terms of Use | Cookie Policy",
          "This website uses cookies to improve your experience.", "Powered by WordPress",
          "Please enable JavaScript to view the comments.", "Back to top"]
COOKIE = ["We value your privacy.", "We and our partners use cookies to store and access information on your device.",
          "By clicking Accept all, you agree to the storing of cookies on your device.", "Accept all",
          "Reject all", "Manage preferences", "Cookie Policy", "Necessary cookies are always active."]
LOREM = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
         "et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut "
         "aliquip ex ea commodo consequat.")
JS = ["var _gaq = _gaq || [];", "function init() { document.getElementById('menu').style.display = 'none'; }",
      "window.dataLayer = window.dataLayer || [];", ".header { color: #333; margin: 0 auto; }",
      "if (typeof jQuery !== 'undefined') { jQuery(document).ready(function() { slider.start(); }); }",
      "@media (max-width: 600px) { .sidebar { display: none; } }"]
SPAM_WORDS = ("cheap best price buy now free shipping discount watches pills casino bonus win "
              "limited offer click here deal sale bitcoin crypto loans online guaranteed").split()
SHORT = ["404 Not Found", "Page not found", "Loading...", "Under construction", "Coming soon!",
         "Access denied", "Click here", "Error 503: Service Unavailable", "Redirecting...",
         "Sorry, this page is no longer available.", "Thank you for subscribing!", "Welcome", "", "   \n  \n",
         "Untitled", "test", "asdf", "Hello world"]


# ------------------------------------------------------------ personal data
def luhn_check_digit(digits: str) -> int:
    """The Luhn check digit to append to ``digits`` (a str of decimal digits).

    >>> luhn_check_digit("7992739871")
    3
    """
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 0:  # the digit next to the check digit is doubled
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return (10 - total % 10) % 10


def iban_check_digits(country: str, bban: str) -> str:
    """The two ISO 7064 mod-97 check digits of an IBAN.

    >>> iban_check_digits("GB", "WEST12345698765432")
    '82'
    """
    rearranged = bban + country + "00"
    num = "".join(str(int(c, 36)) for c in rearranged)
    return f"{98 - int(num) % 97:02d}"


_IBAN_FORMATS = {"DE": "8n10n", "GB": "4a14n", "FR": "10n11c2n", "ES": "20n", "NL": "4a10n", "IT": "1a10n12c"}


class _Pii:
    def __init__(self, rng: random.Random):
        self.r = rng

    def email(self) -> str:
        r = self.r
        first, last = r.choice(NAMES).lower().split()[:2]
        user = r.choice([f"{first}.{last}", f"{first[0]}{last}", f"{first}{r.randrange(10, 99)}", f"{last}.{first}"])
        user = user.encode("ascii", "ignore").decode() or "info"
        return f"{user}@{r.choice(['gmail.com', 'posteo.de', 'outlook.com', 'example-mail.org', 'fastmail.fm', 'uni-muenster.de'])}"

    def ipv4(self) -> str:
        r = self.r
        return f"{r.choice([23, 31, 45, 62, 77, 81, 91, 104, 109, 146, 151, 176, 185, 193, 212, 217])}." \
               f"{r.randrange(0, 256)}.{r.randrange(0, 256)}.{r.randrange(1, 255)}"

    def ipv6(self) -> str:
        r = self.r
        head = r.choice(["2a00:1450", "2a01:4f8", "2606:4700", "2a02:26f0", "2001:4860"])
        groups = [f"{r.randrange(0, 1 << 16):x}" for _ in range(r.choice([2, 6]))]
        return head + ":" + (":".join(groups) if len(groups) == 6 else ":".join(groups) + "::" + f"{r.randrange(1, 1 << 16):x}")

    def phone(self) -> str:
        r = self.r
        n = lambda k: "".join(str(r.randrange(10)) for _ in range(k))  # noqa: E731
        return r.choice([
            f"+44 20 {n(4)} {n(4)}", f"+49 30 {n(7)}", f"+33 1 {n(2)} {n(2)} {n(2)} {n(2)}",
            f"+34 91 {n(3)} {n(2)} {n(2)}", f"+1 {r.randrange(201, 990)} {r.randrange(200, 999)} {n(4)}",
            f"({r.randrange(201, 990)}) {r.randrange(200, 999)}-{n(4)}", f"{r.randrange(201, 990)}-{r.randrange(200, 999)}-{n(4)}",
        ])

    def card(self) -> str:
        r = self.r
        kind = r.randrange(3)
        if kind == 0:
            body = "4" + "".join(str(r.randrange(10)) for _ in range(14))
        elif kind == 1:
            body = str(r.randrange(51, 56)) + "".join(str(r.randrange(10)) for _ in range(13))
        else:
            body = r.choice(["34", "37"]) + "".join(str(r.randrange(10)) for _ in range(12))
        num = body + str(luhn_check_digit(body))
        sep = r.choice([" ", "-", ""])
        if len(num) == 15:
            return sep.join([num[:4], num[4:10], num[10:]])
        return sep.join(num[i:i + 4] for i in range(0, 16, 4))

    def iban(self) -> str:
        r = self.r
        country = r.choice(sorted(_IBAN_FORMATS))
        fmt, bban, i = _IBAN_FORMATS[country], [], 0
        while i < len(fmt):
            j = i
            while fmt[j].isdigit():
                j += 1
            count, cls = int(fmt[i:j]), fmt[j]
            pool = "0123456789" if cls == "n" else ("ABCDEFGHIJKLMNOPQRSTUVWXYZ" if cls == "a" else
                                                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            bban.append("".join(r.choice(pool) for _ in range(count)))
            i = j + 1
        b = "".join(bban)
        iban = country + iban_check_digits(country, b) + b
        return " ".join(iban[k:k + 4] for k in range(0, len(iban), 4)) if r.random() < 0.5 else iban


# ------------------------------------------------------------------ the generator
def _pl(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "o", "u"):
        return noun[:-1] + "ies"
    return noun + "s"


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


class _Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.pii = _Pii(self.r)
        self.pool: List[Dict[str, Any]] = []  # earlier articles, for duplicates

    # -- English prose
    def sentence(self, t: Dict[str, List[str]]) -> str:
        r = self.r
        rnd = r.random

        def c(seq):  # random.choice, 3x cheaper (a float per pick; still deterministic)
            return seq[int(rnd() * len(seq))]

        def rr(lo, hi=None):
            if hi is None:
                lo, hi = 0, lo
            return lo + int(rnd() * (hi - lo))
        noun, adj, verb = t["noun"], t["adj"], t["verb"]
        k = rr(11)
        if k == 0:
            subj = f"the {c(adj)} {c(noun)}"
        elif k == 1:
            subj = f"our {c(noun)}"
        elif k == 2:
            subj = c(NAMES).split()[0]
        elif k == 3:
            subj = f"{_a(c(adj))} {c(noun)} from {c(PLACES)}"
        elif k == 4:
            subj = f"this {c(noun)}"
        elif k == 5:
            subj = f"every {c(noun)} in the {c(noun)}"
        elif k == 6:
            subj = "my neighbour"
        elif k == 7:
            subj = f"the team behind the {c(noun)}"
        elif k == 8:
            subj = c(NAMES)
        elif k == 9:
            subj = "nobody"
        else:
            subj = f"one of the {c(adj)} {_pl(c(noun))}"
        k = rr(9)
        if k == 0:
            vp = f"{c(verb)} the {c(adj)} {c(noun)}"
        elif k == 1:
            vp = f"{c(verb)} it {c(ADVERBS)}"
        elif k == 2:
            vp = f"{c(verb)} {_a(c(noun))} {c(PREPS)} the {c(noun)}"
        elif k == 3:
            vp = f"had never {c(verb)} {_a(c(noun))} like that"
        elif k == 4:
            vp = f"{c(verb)} {rr(2, 40)} {_pl(c(noun))} in {rr(1890, 2024)}"
        elif k == 5:
            vp = f"was {c(ADVERBS)} {c(adj)} about the {c(noun)}"
        elif k == 6:
            vp = f"{c(verb)} the {c(noun)} and then {c(verb)} the {c(noun)}"
        elif k == 7:
            vp = f"said that the {c(noun)} was {c(adj)} enough"
        else:
            vp = f"wanted to know why the {c(noun)} {c(verb)} so {c(ADVERBS)}"
        k = rr(10)
        if k < 3:
            tail = ""
        elif k == 3:
            tail = f" {c(PREPS)} {c(PLACES)}"
        elif k == 4:
            tail = f" because the {c(noun)} was {c(adj)}"
        elif k == 5:
            tail = f", which {c(verb)} the {c(adj)} {c(noun)}"
        elif k == 6:
            tail = f" with the {c(noun)}"
        elif k == 7:
            tail = f" after {rr(2, 12)} weeks"
        elif k == 8:
            tail = f" to keep the {c(noun)} {c(adj)}"
        else:
            tail = f" and {c(NAMES).split()[0]} {c(verb)} the {c(noun)}"
        s = f"{c(CONNECT)}{subj} {vp}{tail}" if rnd() < 0.25 else f"{subj} {vp}{tail}"
        x = rnd()
        return s[0].upper() + s[1:] + ("." if x < 0.9 else "?" if x < 0.96 else "!")

    def paragraph(self, t, k: Optional[int] = None) -> str:
        k = k or self.r.randrange(3, 8)
        return " ".join(self.sentence(t) for _ in range(k))

    def title(self, t) -> str:
        r = self.r
        c = r.choice
        return r.choice([f"How to Choose a {c(t['adj']).title()} {c(t['noun']).title()}",
                         f"{r.randrange(3, 15)} Things I Learned About {c(t['noun']).title()}s",
                         f"A Weekend in {c(PLACES)}", f"Why the {c(t['noun']).title()} Matters",
                         f"Notes on the {c(t['adj']).title()} {c(t['noun']).title()}"])

    def article(self, with_pii: bool = False) -> Tuple[str, str]:
        r = self.r
        topic = r.choice(sorted(TOPICS))
        t = TOPICS[topic]
        lines: List[str] = []
        if r.random() < 0.35:
            lines.append(r.choice(NAV))
        lines.append(self.title(t))
        if r.random() < 0.3:
            lines.append(f"By {r.choice(NAMES)} | {r.randrange(1, 29)} {r.choice(['March', 'June', 'October'])} {r.randrange(2012, 2025)}")
        for _ in range(r.randrange(2, 9)):
            lines.append(self.paragraph(t))
        if with_pii:
            p = self.pii
            extra = [
                f"If you have questions, write to {p.email()} or call {p.phone()} on weekdays.",
                f"Our office in {r.choice(PLACES)} can also be reached at {p.phone()}, and the editor answers mail sent to {p.email()}.",
                f"The donation account is {p.iban()} and we thank everyone who supported the project this year.",
                f"One reader reported that the card {p.card()} was charged twice, so we refunded the order.",
                f"The old mirror at {p.ipv4()} was retired; the new server answers on {p.ipv6()} and on {p.ipv4()}.",
                f"Please do not share your card number {p.card()} or your IBAN {p.iban()} with anybody who calls you.",
            ]
            r.shuffle(extra)
            lines.insert(r.randrange(2, len(lines) + 1), " ".join(extra[: r.randrange(2, 6)]))
        elif r.random() < 0.15:
            lines.append(f"Questions and corrections can be sent to {self.pii.email()} at any time.")
        if r.random() < 0.4:
            lines.append(r.choice(FOOTER).format(y=r.randrange(2015, 2025), site=r.choice(SITES)))
        return topic, "\n".join(lines)

    # -- other kinds
    def multilingual(self) -> Tuple[str, str]:
        r = self.r
        lang = r.choice(sorted(FOREIGN))
        sep, sents = FOREIGN[lang]
        picked = [s.format(p=r.choice(PLACES)) for s in r.sample(sents, r.randrange(3, len(sents) + 1))]
        cut = sorted(r.sample(range(1, len(picked)), min(len(picked) - 1, r.randrange(1, 3))))
        paras = [sep.join(picked[a:b]) for a, b in zip([0] + cut, cut + [len(picked)])]
        return lang, "\n\n".join(paras)

    def broken(self) -> Tuple[str, str]:
        r = self.r
        topic, text = self.article()
        lines = text.split("\n")
        for _ in range(r.randrange(1, 4)):
            i = r.randrange(len(lines))
            kind = r.randrange(6)
            if kind == 0:    # control characters and an ANSI colour escape from a log capture
                lines[i] = "\x1b[1;32m" + lines[i] + "\x1b[0m\x07"
            elif kind == 1:  # NUL bytes and backspaces from a bad conversion
                w = lines[i].split(" ")
                w.insert(r.randrange(len(w) + 1), "\x00\x00\x08")
                lines[i] = " ".join(w)
            elif kind == 2:  # Unicode spaces: no-break, em, ideographic, thin
                w = lines[i].split(" ")
                seps = r.choices(["\u00a0", "\u2003", "\u3000", "\u2009", " "], k=len(w))
                lines[i] = "".join(a + b for a, b in zip(w, seps)).rstrip()
            elif kind == 3:  # mojibake: UTF-8 read as Latin-1 (valid UTF-8 again, wrong text)
                lines[i] = f"Caf\u00c3\u00a9 in {r.choice(PLACES)} served cr\u00c3\u00a8me br\u00c3\u00bbl\u00c3\u00a9e. " + lines[i]
            elif kind == 4:  # undecodable bytes, as JSON carries them: lone surrogates
                w = lines[i].split(" ")
                j = r.randrange(len(w))
                w[j] = w[j] + "".join(chr(0xDC80 + r.randrange(0x80)) for _ in range(r.randrange(1, 3)))
                lines[i] = " ".join(w)
            else:            # replacement characters left by an earlier decoder
                lines[i] = lines[i].replace("e", "\ufffd", 2)
        return topic, "\n".join(lines)

    def boilerplate(self) -> str:
        r = self.r
        k = r.randrange(4)
        site = r.choice(SITES)
        if k == 0:
            return "\n".join(r.sample(COOKIE, r.randrange(3, len(COOKIE))))
        if k == 1:
            body = r.sample(NAV, r.randrange(4, 9)) + [f.format(y=r.randrange(2015, 2025), site=site) for f in r.sample(FOOTER, 3)]
            return "\n".join(body)
        if k == 2:
            return f"{r.choice(['Sample Page', 'About Us', 'Our Services'])}\n\n" + "\n\n".join([LOREM] * r.randrange(1, 4))
        return "\n".join(r.sample(JS, r.randrange(2, len(JS))) + [r.choice(NAV)])

    def spam(self) -> str:
        r = self.r
        k = r.randrange(3)
        if k == 0:
            phrase = " ".join(r.sample(SPAM_WORDS, 5))
            return "\n".join([phrase.upper() + "!!!"] * r.randrange(5, 30))
        if k == 1:
            return " ".join("#" + w for w in r.choices(SPAM_WORDS, k=r.randrange(30, 120)))
        words = r.choices(SPAM_WORDS[:8], k=r.randrange(80, 400))
        return " ".join(words) + " " + r.choice(["Order now.", "Visit our shop today!", "Click the link below."])

    def short(self) -> str:
        return self.r.choice(SHORT)

    def noisy_whitespace(self, text: str) -> str:
        r = self.r
        k = r.randrange(5)
        if k == 0:
            return "\n".join(line + " " * r.randrange(1, 4) for line in text.split("\n"))
        if k == 1:
            return text.replace(". ", ".  ")
        if k == 2:
            return text.replace("\n", "\r\n")
        if k == 3:
            return text.replace(" ", "\u00a0", 40)
        return text.replace("\n", "\n\n\n\n", 3)


def iter_documents(size_bytes: int, seed: int = 1234) -> Iterator[Dict[str, Any]]:
    """Yields demo records ``{"id", "url", "kind", "lang", "text"}`` until their
    JSON lines add up to about ``size_bytes``."""
    g = _Gen(seed)
    r = g.r
    kinds, weights = list(KINDS), list(KINDS.values())
    total, n = 0, 0
    while total < size_bytes:
        kind = r.choices(kinds, weights)[0]
        if kind in ("exact_duplicate", "near_duplicate", "syndicated") and len(g.pool) < 20:
            kind = "article"
        lang = "en"
        if kind in ("article", "article_pii"):
            _topic, text = g.article(with_pii=kind == "article_pii")
            if len(g.pool) < 4000:
                g.pool.append(text)
            else:
                g.pool[r.randrange(len(g.pool))] = text
        elif kind == "exact_duplicate":
            text = r.choice(g.pool)
        elif kind == "near_duplicate":
            text = g.noisy_whitespace(r.choice(g.pool))
        elif kind == "syndicated":
            lines = r.choice(g.pool).split("\n")
            text = "\n".join(r.sample(NAV, 2) + lines + [r.choice(NAV)])
        elif kind == "multilingual":
            lang, text = g.multilingual()
        elif kind == "broken_encoding":
            _topic, text = g.broken()
        elif kind == "boilerplate":
            text = g.boilerplate()
        elif kind == "spam":
            text = g.spam()
        else:
            text = g.short()
        site = r.choice(SITES)
        rec = {"id": f"demo-{n:07d}", "url": f"https://{site}/{kind.replace('_', '-')}/{n}", "kind": kind,
               "lang": lang, "text": text}
        n += 1
        total += len(text) + 90
        yield rec


def _dump(rec: Dict[str, Any]) -> bytes:
    line = json.dumps(rec, ensure_ascii=False)
    try:
        return line.encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # lone surrogates: JSON escapes keep the file valid UTF-8
        return json.dumps(rec, ensure_ascii=True).encode("ascii") + b"\n"


#: the smallest corpus the demo makes: about one document
MIN_DOC_BYTES = 1000


def _check_free_space(out_dir: str, nbytes: float) -> None:
    """Refuses (OSError ENOSPC) a corpus that would not fit, with the run's output
    beside it (about as large again), before anything is written."""
    import errno
    import shutil

    d = os.path.abspath(out_dir)
    while not os.path.exists(d):
        d = os.path.dirname(d)
    free = shutil.disk_usage(d).free
    need = 2.2 * nbytes + (64 << 20)
    if free < need:
        raise OSError(errno.ENOSPC, f"a {nbytes / 1e6:g} MB demo corpus and its output need about "
                      f"{need / 1e9:.1f} GB, and {d} has {free / 1e9:.1f} GB free: choose a smaller --size-mb")


def _write_shard(tmp: str, data: bytes, compression: str) -> None:
    with open(tmp, "wb") as f:
        if compression == "gzip":
            import zlib
            for k in range(0, len(data), 1 << 20):  # independent members: cheap resume
                c = zlib.compressobj(3, zlib.DEFLATED, 31)
                f.write(c.compress(data[k:k + (1 << 20)]) + c.flush())
        elif compression == "zstd":
            import zstandard
            cz = zstandard.ZstdCompressor(level=3)
            for k in range(0, len(data), 1 << 20):
                f.write(cz.compress(data[k:k + (1 << 20)]))
        else:
            f.write(data)


def generate(out_dir: str, size_mb: float = 50.0, seed: int = 1234, shard_mb: float = 16.0,
             compression: str = "none") -> Dict[str, Any]:
    """Writes the demo corpus as sharded JSONL under ``out_dir``
    (``web-00000.jsonl``, ...; ``compression`` "gzip" or "zstd" adds ``.gz`` /
    ``.zst``) and returns a summary: paths, documents, bytes, counts per kind.
    Existing shards of an earlier call are replaced."""
    if not isinstance(size_mb, (int, float)) or isinstance(size_mb, bool) or not math.isfinite(size_mb) or size_mb <= 0:
        raise ValueError(f"size_mb must be a positive finite number, got {size_mb!r}")
    if size_mb * 1e6 < MIN_DOC_BYTES:
        raise ValueError(f"size_mb={size_mb:g} is smaller than one document: the demo needs at least "
                         f"{MIN_DOC_BYTES / 1e6:g} MB")
    if compression not in ("none", "gzip", "zstd"):
        raise ValueError(f"compression must be none, gzip or zstd, not {compression!r}")
    _check_free_space(out_dir, size_mb * 1e6)
    os.makedirs(out_dir, exist_ok=True)
    suffix = {"none": "", "gzip": ".gz", "zstd": ".zst"}[compression]
    for f in os.listdir(out_dir):
        if f.startswith("web-") and ".jsonl" in f:
            os.remove(os.path.join(out_dir, f))
    shard_bytes = int(shard_mb * 1e6)
    paths: List[str] = []
    counts: Dict[str, int] = {}
    buf: List[bytes] = []
    size = total = docs = 0

    def flush() -> None:
        nonlocal buf, size
        if not buf:
            return
        path = os.path.join(out_dir, f"web-{len(paths):05d}.jsonl{suffix}")
        data = b"".join(buf)
        # a full disk, Ctrl-C: no half-written shard left behind (a demo corpus is regenerated, not fsynced)
        with atomic_replace(path, tmp=path + ".tmp", durable=False) as tmp:
            _write_shard(tmp, data, compression)
        paths.append(path)
        buf, size = [], 0

    for rec in iter_documents(int(size_mb * 1e6), seed):
        line = _dump(rec)
        buf.append(line)
        size += len(line)
        total += len(line)
        docs += 1
        counts[rec["kind"]] = counts.get(rec["kind"], 0) + 1
        if size >= shard_bytes:
            flush()
    flush()
    return {"paths": paths, "documents": docs, "bytes": total, "kinds": counts, "seed": seed}
